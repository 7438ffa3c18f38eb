/* The compiled twin of the OTLP encoder's span (otlp.py, OtlpTraceEncoder._span) for records.
 *
 * span(rec, attrs) -> bytes or None: the ResourceSpans.ScopeSpans.spans field (tag 0x12) the
 * Python encoder writes for the SDK span ReadableBuilder.span(rec, attrs) builds, byte for
 * byte. Anything this file is not sure to write the same way (a trace state, events, links,
 * text that is not valid UTF-8, an attribute value that is not str, bool, int64 or float, a
 * status description the SDK's Status would drop) returns None: the caller builds the span.
 */
#include "../_cext.h"

static int put_varint(Buf *b, unsigned long long v) {
    if (buf_grow(b, 10) < 0) return -1;
    while (v >= 0x80) {
        b->p[b->n++] = (char)(v | 0x80);
        v >>= 7;
    }
    b->p[b->n++] = (char)v;
    return 0;
}

static int put_le(Buf *b, unsigned long long v, int bytes) {
    if (buf_grow(b, bytes) < 0) return -1;
    for (int k = 0; k < bytes; k++, v >>= 8) b->p[b->n++] = (char)v;
    return 0;
}

static int put_be64(Buf *b, unsigned long long v) {
    if (buf_grow(b, 8) < 0) return -1;
    for (int k = 7; k >= 0; k--) b->p[b->n++] = (char)(v >> (8 * k));
    return 0;
}

/* Results: 0 written, -1 a Python error, 1 not this file's to write. */
#define SKIP 1

/* A length-delimited field: tag, length, UTF-8 of s. */
static int put_text(Buf *b, unsigned char tag, PyObject *s) {
    if (!PyUnicode_CheckExact(s)) return SKIP;
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(s, &len);
    if (!u) { PyErr_Clear(); return SKIP; }  /* a lone surrogate: the Python encoder escapes it */
    if (put(b, &tag, 1) < 0 || put_varint(b, (unsigned long long)len) < 0 || put(b, u, len) < 0) return -1;
    return 0;
}

/* The value field of one attribute (AnyValue's payload), into b. */
static int put_value(Buf *b, PyObject *v) {
    if (PyUnicode_CheckExact(v)) return put_text(b, 0x0a, v);
    if (v == Py_True) return put(b, "\x10\x01", 2);
    if (v == Py_False) return put(b, "\x10\x00", 2);
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (overflow) return SKIP;
        if (put(b, "\x18", 1) < 0) return -1;
        return put_varint(b, (unsigned long long)x);
    }
    if (PyFloat_CheckExact(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        unsigned long long bits;
        memcpy(&bits, &d, 8);
        if (put(b, "\x21", 1) < 0) return -1;
        return put_le(b, bits, 8);
    }
    return SKIP;
}

/* Appends, at the end of b, the field tag + length of what was written since `from`. */
static int wrap(Buf *b, Py_ssize_t from, unsigned char tag) {
    Py_ssize_t len = b->n - from;
    unsigned char head[11];
    int h = 0;
    head[h++] = tag;
    unsigned long long v = (unsigned long long)len;
    while (v >= 0x80) { head[h++] = (unsigned char)(v | 0x80); v >>= 7; }
    head[h++] = (unsigned char)v;
    if (buf_grow(b, h) < 0) return -1;
    memmove(b->p + from + h, b->p + from, len);
    memcpy(b->p + from, head, h);
    b->n += h;
    return 0;
}

static int put_attributes(Buf *b, PyObject *attrs) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int r;
    while (PyDict_Next(attrs, &pos, &key, &value)) {
        Py_ssize_t kv = b->n;
        if ((r = put_text(b, 0x0a, key))) return r;
        Py_ssize_t val = b->n;
        if ((r = put_value(b, value))) return r;
        if (wrap(b, val, 0x12) < 0 || wrap(b, kv, 0x4a) < 0) return -1;
    }
    return 0;
}

static Py_ssize_t i_name, i_trace, i_span, i_parent, i_remote, i_state, i_start, i_end, i_kind, i_events,
    i_links, i_status, i_desc, n_fields = -1;

static int empty(PyObject *v) {  /* events or links: None or an empty list or tuple */
    if (v == Py_None) return 1;
    return (PyList_CheckExact(v) || PyTuple_CheckExact(v)) && Py_SIZE(v) == 0;
}

static int write_span(Buf *b, PyObject *rec, PyObject *attrs) {
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || !PyDict_CheckExact(attrs)) return SKIP;
    if (PyTuple_GET_ITEM(rec, i_state) != Py_None || !empty(PyTuple_GET_ITEM(rec, i_events))
        || !empty(PyTuple_GET_ITEM(rec, i_links)))
        return SKIP;
    PyObject *trace = PyTuple_GET_ITEM(rec, i_trace);
    unsigned char raw[16];
    if (!PyLong_CheckExact(trace)) return SKIP;
    if (uint_bytes(trace, raw, 16, 0) < 0) return SKIP;
    int r;
    unsigned long long span, parent, start, end, kind, code;
    if (!as_uint64(PyTuple_GET_ITEM(rec, i_span), &span) || !as_uint64(PyTuple_GET_ITEM(rec, i_parent), &parent)
        || !as_uint64(PyTuple_GET_ITEM(rec, i_start), &start) || !as_uint64(PyTuple_GET_ITEM(rec, i_end), &end)
        || !as_uint64(PyTuple_GET_ITEM(rec, i_kind), &kind) || kind > 4
        || !as_uint64(PyTuple_GET_ITEM(rec, i_status), &code) || code > 2)
        return SKIP;
    PyObject *desc = PyTuple_GET_ITEM(rec, i_desc);
    int has_desc = desc != Py_None && (!PyUnicode_CheckExact(desc) || PyUnicode_GET_LENGTH(desc) > 0);
    if (has_desc && (code != 2 || !PyUnicode_CheckExact(desc))) return SKIP;  /* Status drops it, with a warning */
    int remote = PyObject_IsTrue(PyTuple_GET_ITEM(rec, i_remote));
    if (remote < 0) return -1;

    if (put(b, "\x0a\x10", 2) < 0 || put(b, raw, 16) < 0 || put(b, "\x12\x08", 2) < 0 || put_be64(b, span) < 0)
        return -1;
    if (parent && (put(b, "\x22\x08", 2) < 0 || put_be64(b, parent) < 0)) return -1;
    if ((r = put_text(b, 0x2a, PyTuple_GET_ITEM(rec, i_name)))) return r;
    unsigned char k[2] = {0x30, (unsigned char)(kind + 1)};
    if (put(b, k, 2) < 0 || put(b, "\x39", 1) < 0 || put_le(b, start, 8) < 0 || put(b, "\x41", 1) < 0
        || put_le(b, end, 8) < 0)
        return -1;
    if ((r = put_attributes(b, attrs))) return r;
    Py_ssize_t status = b->n;
    if (has_desc) {
        Py_ssize_t text = b->n;
        if ((r = put_text(b, 0x0a, desc))) return r;
        /* put_text wrote tag 0x0a; Status.message is field 2 */
        b->p[text] = 0x12;
    }
    if (code) {
        unsigned char c[2] = {0x18, (unsigned char)code};
        if (put(b, c, 2) < 0) return -1;
    }
    if (wrap(b, status, 0x7a) < 0) return -1;
    if (put(b, "\x85\x01", 2) < 0 || put_le(b, parent && remote ? 0x300 : 0x100, 4) < 0) return -1;
    return wrap(b, 0, 0x12);
}

/* span(rec, attrs) -> bytes or None */
static PyObject *span(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "span() takes a record and its attributes");
        return NULL;
    }
    if (n_fields < 0) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    Buf b;
    buf_init(&b);
    int r = write_span(&b, args[0], args[1]);
    PyObject *out = NULL;
    if (r == 0) out = PyBytes_FromStringAndSize(b.p, b.n);
    else if (r == SKIP) out = Py_NewRef(Py_None);
    buf_free(&b);
    return out;
}

/* configure(dict): the record's length and field indices span() reads. */
static PyObject *configure(PyObject *self, PyObject *config) {
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes a dict");
        return NULL;
    }
    Py_ssize_t fields;
    if (take_index(config, "fields", &fields) || take_index(config, "NAME", &i_name)
        || take_index(config, "TRACE_ID", &i_trace) || take_index(config, "SPAN_ID", &i_span)
        || take_index(config, "PARENT_ID", &i_parent) || take_index(config, "PARENT_REMOTE", &i_remote)
        || take_index(config, "TRACE_STATE", &i_state) || take_index(config, "START", &i_start)
        || take_index(config, "END", &i_end) || take_index(config, "KIND", &i_kind)
        || take_index(config, "EVENTS", &i_events) || take_index(config, "LINKS", &i_links)
        || take_index(config, "STATUS", &i_status) || take_index(config, "STATUS_DESC", &i_desc))
        return NULL;
    Py_ssize_t all[] = {i_name, i_trace, i_span, i_parent, i_remote, i_state, i_start, i_end, i_kind, i_events,
                        i_links, i_status, i_desc};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
        if (all[k] >= fields) {
            PyErr_SetString(PyExc_ValueError, "configure(): a field index past the record");
            return NULL;
        }
    }
    n_fields = fields;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "Sets the record's length and the field indices span() reads."},
    {"span", (PyCFunction)(void (*)(void))span, METH_FASTCALL,
     "A record's OTLP Span field (bytes), or None where the Python encoder must write it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlp", NULL, -1, methods};

PyMODINIT_FUNC PyInit__otlp(void) { return PyModule_Create(&module); }
