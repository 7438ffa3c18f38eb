/* What otel_rl's compiled twins share: a growable byte buffer, reading the dict each module's
 * configure() takes (so a key the Python side forgot fails loudly, by name), exact integer
 * conversions, and handing a failure to the Python method that reports it. */
#ifndef OTEL_RL_CEXT_H
#define OTEL_RL_CEXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char local[1024];
} Buf;

static inline void buf_init(Buf *b) { b->p = b->local; b->n = 0; b->cap = sizeof(b->local); }

static inline void buf_free(Buf *b) { if (b->p != b->local) PyMem_Free(b->p); }

static inline int buf_grow(Buf *b, Py_ssize_t more) {
    if (b->n + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->n + more) cap *= 2;
    char *p;
    if (b->p == b->local) {
        p = PyMem_Malloc(cap);
        if (p) memcpy(p, b->local, b->n);
    } else {
        p = PyMem_Realloc(b->p, cap);
    }
    if (!p) { PyErr_NoMemory(); return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int put(Buf *b, const void *s, Py_ssize_t len) {
    if (buf_grow(b, len) < 0) return -1;
    memcpy(b->p + b->n, s, len);
    b->n += len;
    return 0;
}

#define PUTS(b, s) put((b), (s), (Py_ssize_t)(sizeof(s) - 1))

/* The offset of object slot `name` of cls (__slots__), from its member descriptor: how the
 * compiled twins read and set the slots of otel_rl's Python classes. -1 with TypeError when
 * `name` is not such a slot. */
static inline int slot_offset(PyTypeObject *cls, const char *name, Py_ssize_t *off) {
    PyObject *d = PyDict_GetItemString(cls->tp_dict, name);
    if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type) || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", cls->tp_name, name);
        return -1;
    }
    *off = ((PyMemberDescrObject *)d)->d_member->offset;
    return 0;
}

/* config[key] into *slot (a new reference, replacing what was there). */
static inline int take(PyObject *config, const char *key, PyObject **slot) {
    PyObject *v = PyDict_GetItemString(config, key);
    if (!v) { PyErr_Format(PyExc_KeyError, "%s", key); return -1; }
    Py_XSETREF(*slot, Py_NewRef(v));
    return 0;
}

/* config[key], a non-negative index, into *slot. */
static inline int take_index(PyObject *config, const char *key, Py_ssize_t *slot) {
    PyObject *v = PyDict_GetItemString(config, key);
    if (!v) { PyErr_Format(PyExc_KeyError, "%s", key); return -1; }
    Py_ssize_t i = PyLong_AsSsize_t(v);
    if (i < 0) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, key); return -1; }
    *slot = i;
    return 0;
}

/* An exact int's magnitude and sign read straight from its digits, where the layout is the one
 * CPython 3.11 and earlier use (a signed digit count, 30-bit digits): the API's conversions
 * loop with overflow checks and cost about 60 instructions for a timestamp or an id, read
 * several times a span. 0 where the value needs more than 64 bits or the layout differs. */
static inline int small_int(PyObject *v, unsigned long long *mag, int *negative) {
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    Py_ssize_t size = Py_SIZE(v);
    const digit *d = ((PyLongObject *)v)->ob_digit;
    unsigned long long m = 0;
    switch (size < 0 ? -size : size) {
        case 3:
            if (d[2] >> 4) return 0;
            m = (unsigned long long)d[2] << 60;
            /* fall through */
        case 2:
            m |= (unsigned long long)d[1] << 30;
            /* fall through */
        case 1:
            m |= d[0];
            /* fall through */
        case 0:
            break;
        default:
            return 0;
    }
    *mag = m;
    *negative = size < 0;
    return 1;
#else
    (void)v; (void)mag; (void)negative;
    return 0;
#endif
}

/* 1 when v is an exact int within int64 (its value in *x); 0 otherwise, with no error set. */
static inline int as_int64(PyObject *v, long long *x) {
    if (!PyLong_CheckExact(v)) return 0;
    unsigned long long m;
    int negative;
    if (small_int(v, &m, &negative)) {
        if (!negative) {
            if (m > (unsigned long long)LLONG_MAX) return 0;
            *x = (long long)m;
        } else {
            if (m > (unsigned long long)LLONG_MAX + 1) return 0;
            *x = (long long)(0 - m);
        }
        return 1;
    }
    int overflow;
    *x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (*x == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return !overflow;
}

/* 1 when v is an exact int in [0, 2^64) (its value in *x); 0 otherwise, with no error set. */
static inline int as_uint64(PyObject *v, unsigned long long *x) {
    if (!PyLong_CheckExact(v)) return 0;
    unsigned long long m;
    int negative;
    if (small_int(v, &m, &negative)) {
        if (negative && m) return 0;
        *x = m;
        return 1;
    }
    *x = PyLong_AsUnsignedLongLong(v);
    if (*x == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

/* a == b for span and trace ids: 1, 0, or -1 (error set). Ids are exact ints, equal but seldom
 * the same object (each record decodes its own), and an int compare through
 * PyObject_RichCompareBool makes a bool object to read back; two ints of up to 64 bits compare
 * here, anything else as Python compares it. */
static inline int same_value(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    unsigned long long x, y;
    int nx, ny;
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b) && small_int(a, &x, &nx) && small_int(b, &y, &ny))
        return x == y && (nx == ny || x == 0);
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

/* An int in [0, 2^(8n)) as n bytes; 0, or -1 (no error set) for a value out of that range. */
static inline int uint_bytes(PyObject *v, unsigned char *out, size_t n, int little_endian) {
#if PY_VERSION_HEX >= 0x030D0000
    int r = _PyLong_AsByteArray((PyLongObject *)v, out, n, little_endian, 0, 0);
#else
    int r = _PyLong_AsByteArray((PyLongObject *)v, out, n, little_endian, 0);
#endif
    if (r < 0) PyErr_Clear();
    return r < 0 ? -1 : 0;
}

/* An empty dict with room for n items: the dicts a batch builds one per record would otherwise
 * grow past their first eight slots (five items) by a resize that moves every item again. */
static inline PyObject *dict_for(Py_ssize_t n) {
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    (void)n;  /* 3.13 keeps that call to itself */
    return PyDict_New();
#endif
}

static const char hex_digits[] = "0123456789abcdef";

/* The 16 lowercase hex digits of u into out (not terminated). */
static inline void hex64(char *out, unsigned long long u) {
    static const char pairs[513] =
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
        "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
        "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
        "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
        "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
        "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
        "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
    for (int k = 14; k >= 0; k -= 2, u >>= 8) memcpy(out + k, pairs + 2 * (u & 255), 2);  /* a byte at a time */
}

/* format(v, "0<2n>x") for an exact int v in [0, 2^(8n)), n <= 16 (a record's id); NULL and no
 * error set for any other value. */
static inline PyObject *hex_text(PyObject *v, size_t n) {
    unsigned char raw[16];
    if (!PyLong_CheckExact(v) || n > sizeof(raw) || uint_bytes(v, raw, n, 0) < 0) return NULL;
    PyObject *s = PyUnicode_New((Py_ssize_t)(2 * n), 127);
    if (!s) return NULL;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(s);
    for (size_t i = 0; i < n; i++) {
        d[2 * i] = (Py_UCS1)hex_digits[raw[i] >> 4];
        d[2 * i + 1] = (Py_UCS1)hex_digits[raw[i] & 15];
    }
    return s;
}

/* format(id, spec) for spec "0<2n>x": made here (hex_text), or by format() for what it leaves. */
static inline PyObject *hex_id(PyObject *id, size_t n, PyObject *spec) {
    PyObject *text = hex_text(id, n);
    return text || PyErr_Occurred() ? text : PyObject_Format(id, spec);
}

/* ids.trace_text(id): the trace file's text of a trace id, 16 hex digits below 2^64 and 32 from
 * there (spec is "032x", for what hex_text leaves); NULL with an error set on failure. */
static inline PyObject *trace_text(PyObject *id, PyObject *spec) {
    PyObject *text = hex_text(id, 8);
    return text || PyErr_Occurred() ? text : hex_id(id, 16, spec);
}

/* Whether v == text, for a str text (only a str can be); no error set. */
static inline int is_text(PyObject *v, PyObject *text) {
    if (!v || !PyUnicode_Check(v)) return 0;
    int r = PyUnicode_Compare(v, text);
    if (r == -1 && PyErr_Occurred()) PyErr_Clear();
    return r == 0;
}

/* obj.name(), or obj() where name is NULL, with an error already set kept over it (a lock
 * released whatever happened before): 0, or -1 with the call's error where it fails. */
static inline int call_keeping_error(PyObject *obj, PyObject *name) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *argv[1] = {obj};
    PyObject *got = name ? PyObject_VectorcallMethod(name, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)
                         : PyObject_CallNoArgs(obj);
    if (!got) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return -1;
    }
    Py_DECREF(got);
    PyErr_Restore(type, value, tb);
    return 0;
}

/* self.method([arg,] exc) with the exception raised now (which it clears): how a compiled
 * twin hands a failure to the Python method that reports it. NULL when that call fails. */
static inline PyObject *report_raised(PyObject *self, PyObject *method, PyObject *arg) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *argv[3] = {self, arg, value ? value : Py_None};
    size_t n = arg ? 3 : 2;
    if (!arg) argv[1] = argv[2];
    PyObject *got = PyObject_VectorcallMethod(method, argv, n | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return got;
}

#endif
