/* The compiled twin of wire.py: a batch of records as bytes, and back.
 *
 * marshal spends most of its time on a record's big integers (the 128-bit trace id, 64-bit
 * span ids, nanosecond times, thread idents), written 15 bits at a time. Here those fields of
 * every record are written as fixed-width little-endian binary (RECORD_BYTES a record), and
 * marshal takes only the rest: (thread names, the records' names, the other fields of the
 * records that have any). dumps() returns None when a record does not fit that shape (a
 * field of another type or range): the caller then marshals the batch as it is.
 *
 * Layout: MAGIC (3 bytes), record count (u32), the fixed blocks, then the marshal part.
 */
#include "../_cext.h"
#include <marshal.h>

#define MAGIC "\0W1"
#define MAGIC_LEN 3
#define RECORD_BYTES 64
#define MARSHAL_VERSION 4
#define MAX_FIELDS 64

static Py_ssize_t n_fields = -1;
static Py_ssize_t i_name, i_trace, i_span, i_parent, i_remote, i_flags, i_start, i_end, i_kind, i_thread, i_status;
static Py_ssize_t i_bundle = -1;
static Py_ssize_t rest[MAX_FIELDS], n_rest;  /* the fields marshal takes */

static void put_u64(unsigned char *p, unsigned long long v) {
    for (int k = 0; k < 8; k++, v >>= 8) p[k] = (unsigned char)v;
}

static unsigned long long get_u64(const unsigned char *p) {
    unsigned long long v = 0;
    for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
    return v;
}

static int u8_of(PyObject *v, unsigned char *out) {
    long long x;
    if (!as_int64(v, &x) || x < 0 || x > 255) return 0;
    *out = (unsigned char)x;
    return 1;
}

/* The fixed block of rec, or 0 when it does not fit. */
static int pack_fixed(PyObject *rec, unsigned char *p) {
    PyObject *trace = PyTuple_GET_ITEM(rec, i_trace);
    if (!PyLong_CheckExact(trace)) return 0;
    if (uint_bytes(trace, p, 16, 1) < 0) return 0;
    unsigned long long span, parent, thread = 0;
    long long start, end;
    unsigned char flags, kind, status;
    PyObject *remote = PyTuple_GET_ITEM(rec, i_remote), *th = PyTuple_GET_ITEM(rec, i_thread);
    if (!as_uint64(PyTuple_GET_ITEM(rec, i_span), &span) || !as_uint64(PyTuple_GET_ITEM(rec, i_parent), &parent)
        || !as_int64(PyTuple_GET_ITEM(rec, i_start), &start) || !as_int64(PyTuple_GET_ITEM(rec, i_end), &end)
        || !u8_of(PyTuple_GET_ITEM(rec, i_flags), &flags) || !u8_of(PyTuple_GET_ITEM(rec, i_kind), &kind)
        || !u8_of(PyTuple_GET_ITEM(rec, i_status), &status) || (remote != Py_True && remote != Py_False)
        || (th != Py_None && !as_uint64(th, &thread)))
        return 0;
    put_u64(p + 16, span);
    put_u64(p + 24, parent);
    put_u64(p + 32, (unsigned long long)start);
    put_u64(p + 40, (unsigned long long)end);
    put_u64(p + 48, thread);
    p[56] = (unsigned char)((remote == Py_True) | (th != Py_None) << 1);
    p[57] = flags;
    p[58] = kind;
    p[59] = status;
    return 1;
}

/* dumps(thread_names, records) -> bytes, or None when a record does not fit */
static PyObject *dumps(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "dumps(thread_names, records) takes a list of records");
        return NULL;
    }
    if (n_fields < 0) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *records = args[1];
    Py_ssize_t n = PyList_GET_SIZE(records);
    if (n > 0xFFFFFFFFLL) Py_RETURN_NONE;
    PyObject *fixed = PyBytes_FromStringAndSize(NULL, MAGIC_LEN + 4 + n * RECORD_BYTES);
    PyObject *names = PyList_New(n), *rests = PyList_New(0), *tail = NULL, *out = NULL;
    if (!fixed || !names || !rests) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(fixed);
    memcpy(p, MAGIC, MAGIC_LEN);
    for (int k = 0; k < 4; k++) p[MAGIC_LEN + k] = (unsigned char)((unsigned long long)n >> (8 * k));
    p += MAGIC_LEN + 4;
    for (Py_ssize_t k = 0; k < n; k++, p += RECORD_BYTES) {
        PyObject *rec = PyList_GET_ITEM(records, k);
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || !pack_fixed(rec, p)) {
            out = Py_NewRef(Py_None);  /* not this file's: plain marshal */
            goto done;
        }
        PyList_SET_ITEM(names, k, Py_NewRef(PyTuple_GET_ITEM(rec, i_name)));
        unsigned int index = 0;
        for (Py_ssize_t j = 0; j < n_rest; j++) {
            if (PyTuple_GET_ITEM(rec, rest[j]) == Py_None) continue;
            PyObject *fields = PyTuple_New(n_rest);
            if (!fields) goto done;
            for (Py_ssize_t f = 0; f < n_rest; f++)
                PyTuple_SET_ITEM(fields, f, Py_NewRef(PyTuple_GET_ITEM(rec, rest[f])));
            int r = PyList_Append(rests, fields);
            Py_DECREF(fields);
            if (r < 0) goto done;
            index = (unsigned int)PyList_GET_SIZE(rests);
            break;
        }
        p[60] = (unsigned char)index;
        p[61] = (unsigned char)(index >> 8);
        p[62] = (unsigned char)(index >> 16);
        p[63] = (unsigned char)(index >> 24);
    }
    PyObject *parts = PyTuple_Pack(3, args[0], names, rests);
    if (!parts) goto done;
    tail = PyMarshal_WriteObjectToString(parts, MARSHAL_VERSION);
    Py_DECREF(parts);
    if (!tail) goto done;
    Py_ssize_t head = PyBytes_GET_SIZE(fixed);
    if (_PyBytes_Resize(&fixed, head + PyBytes_GET_SIZE(tail)) < 0) goto done;
    memcpy(PyBytes_AS_STRING(fixed) + head, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail));
    out = fixed;
    fixed = NULL;
done:
    Py_XDECREF(fixed);
    Py_XDECREF(names);
    Py_XDECREF(rests);
    Py_XDECREF(tail);
    return out;
}

static PyObject *unpack_one(const unsigned char *p, PyObject *name, PyObject *rests) {
    PyObject *rec = PyTuple_New(n_fields);
    if (!rec) return NULL;
    unsigned int index = p[60] | p[61] << 8 | p[62] << 16 | (unsigned int)p[63] << 24;
    PyObject *fields = NULL;
    if (index) {
        if ((Py_ssize_t)index > PyList_GET_SIZE(rests)) goto corrupt;
        fields = PyList_GET_ITEM(rests, index - 1);
        if (!PyTuple_CheckExact(fields) || PyTuple_GET_SIZE(fields) != n_rest) goto corrupt;
    }
    for (Py_ssize_t j = 0; j < n_rest; j++)
        PyTuple_SET_ITEM(rec, rest[j], Py_NewRef(fields ? PyTuple_GET_ITEM(fields, j) : Py_None));
    PyTuple_SET_ITEM(rec, i_name, Py_NewRef(name));
    PyObject *v;
#define SET(i, expr) do { if (!(v = (expr))) goto failed; PyTuple_SET_ITEM(rec, (i), v); } while (0)
    SET(i_trace, _PyLong_FromByteArray(p, 16, 1, 0));
    SET(i_span, PyLong_FromUnsignedLongLong(get_u64(p + 16)));
    SET(i_parent, PyLong_FromUnsignedLongLong(get_u64(p + 24)));
    SET(i_start, PyLong_FromLongLong((long long)get_u64(p + 32)));
    SET(i_end, PyLong_FromLongLong((long long)get_u64(p + 40)));
    SET(i_thread, p[56] & 2 ? PyLong_FromUnsignedLongLong(get_u64(p + 48)) : Py_NewRef(Py_None));
    SET(i_remote, PyBool_FromLong(p[56] & 1));
    SET(i_flags, PyLong_FromLong(p[57]));
    SET(i_kind, PyLong_FromLong(p[58]));
    SET(i_status, PyLong_FromLong(p[59]));
#undef SET
    return rec;
corrupt:
    PyErr_SetString(PyExc_ValueError, "a packed batch that does not hold together");
failed:
    /* the slots not set yet are NULL, which tuple deallocation skips */
    Py_DECREF(rec);
    return NULL;
}

/* loads(data) -> (thread_names, records): the inverse of dumps() */
static PyObject *loads(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *parts = NULL, *records = NULL, *out = NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t size = view.len;
    if (n_fields < 0) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        goto done;
    }
    if (size < MAGIC_LEN + 4 || memcmp(p, MAGIC, MAGIC_LEN) != 0) {
        PyErr_SetString(PyExc_ValueError, "not a packed batch");
        goto done;
    }
    Py_ssize_t n = p[3] | p[4] << 8 | p[5] << 16 | (Py_ssize_t)p[6] << 24;
    Py_ssize_t head = MAGIC_LEN + 4 + n * RECORD_BYTES;
    if (head > size) {
        PyErr_SetString(PyExc_ValueError, "a packed batch cut short");
        goto done;
    }
    parts = PyMarshal_ReadObjectFromString((const char *)p + head, size - head);
    if (!parts) goto done;
    if (!PyTuple_CheckExact(parts) || PyTuple_GET_SIZE(parts) != 3 || !PyList_CheckExact(PyTuple_GET_ITEM(parts, 1))
        || PyList_GET_SIZE(PyTuple_GET_ITEM(parts, 1)) != n || !PyList_CheckExact(PyTuple_GET_ITEM(parts, 2))) {
        PyErr_SetString(PyExc_ValueError, "a packed batch that does not hold together");
        goto done;
    }
    PyObject *names = PyTuple_GET_ITEM(parts, 1), *rests = PyTuple_GET_ITEM(parts, 2);
    records = PyList_New(n);
    if (!records) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *rec = unpack_one(p + MAGIC_LEN + 4 + k * RECORD_BYTES, PyList_GET_ITEM(names, k), rests);
        if (!rec) goto done;
        PyList_SET_ITEM(records, k, rec);
    }
    out = PyTuple_Pack(2, PyTuple_GET_ITEM(parts, 0), records);
done:
    Py_XDECREF(parts);
    Py_XDECREF(records);
    PyBuffer_Release(&view);
    return out;
}

static int take_field(PyObject *config, const char *key, Py_ssize_t *slot) {  /* an index below MAX_FIELDS */
    if (take_index(config, key, slot) < 0) return -1;
    if (*slot < MAX_FIELDS) return 0;
    PyErr_SetString(PyExc_ValueError, key);
    return -1;
}

/* configure(dict): the record's length and the index of each field written in binary. */
static PyObject *configure(PyObject *self, PyObject *config) {
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes a dict");
        return NULL;
    }
    Py_ssize_t fields;
    if (take_field(config, "fields", &fields) || take_field(config, "NAME", &i_name)
        || take_field(config, "TRACE_ID", &i_trace) || take_field(config, "SPAN_ID", &i_span)
        || take_field(config, "PARENT_ID", &i_parent) || take_field(config, "PARENT_REMOTE", &i_remote)
        || take_field(config, "FLAGS", &i_flags) || take_field(config, "START", &i_start)
        || take_field(config, "END", &i_end) || take_field(config, "KIND", &i_kind)
        || take_field(config, "THREAD", &i_thread) || take_field(config, "STATUS", &i_status)
        || take_field(config, "BUNDLE", &i_bundle))
        return NULL;
    Py_ssize_t own[] = {i_name, i_trace, i_span, i_parent, i_remote, i_flags, i_start, i_end, i_kind, i_thread,
                        i_status};
    int taken[MAX_FIELDS] = {0};
    for (size_t k = 0; k < sizeof(own) / sizeof(own[0]); k++) {
        if (own[k] >= fields || taken[own[k]]) {
            PyErr_SetString(PyExc_ValueError, "configure(): field indices must be distinct and in the record");
            return NULL;
        }
        taken[own[k]] = 1;
    }
    n_rest = 0;
    for (Py_ssize_t k = 0; k < fields; k++)
        if (!taken[k]) rest[n_rest++] = k;
    n_fields = fields;
    Py_RETURN_NONE;
}

/* survey(records) -> (every one a tuple, spans, thread idents), or None: what the export thread
 * asks of a batch before it ships it (record.span_count, the threads whose names go with it),
 * in one pass rather than three Python ones. None where a tuple is not a record (the caller's
 * Python steps say what is wrong with it); with a record that is not a tuple, (False, 0, set()). */
static PyObject *survey(PyObject *self, PyObject *records) {
    if (!PyList_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "survey() takes a list of records");
        return NULL;
    }
    if (n_fields < 0) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *threads = PySet_New(NULL), *last = NULL;
    if (!threads) return NULL;
    Py_ssize_t spans = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(records); k++) {
        PyObject *rec = PyList_GET_ITEM(records, k);
        if (!PyTuple_CheckExact(rec)) {
            Py_DECREF(threads);
            return Py_BuildValue("(OnN)", Py_False, (Py_ssize_t)0, PySet_New(NULL));
        }
        if (PyTuple_GET_SIZE(rec) != n_fields) {
            Py_DECREF(threads);
            Py_RETURN_NONE;
        }
        PyObject *bundle = PyTuple_GET_ITEM(rec, i_bundle);
        spans++;
        if (bundle != Py_None) {
            int t = PyObject_IsTrue(bundle);
            if (t < 0) { Py_DECREF(threads); return NULL; }
            if (t) {
                if (!PyTuple_CheckExact(bundle) || PyTuple_GET_SIZE(bundle) < 2) {
                    Py_DECREF(threads);
                    Py_RETURN_NONE;
                }
                Py_ssize_t n = PyObject_Length(PyTuple_GET_ITEM(bundle, 1));
                if (n < 0) { Py_DECREF(threads); return NULL; }
                spans += n;
            }
        }
        PyObject *thread = PyTuple_GET_ITEM(rec, i_thread);
        if (thread != last && PySet_Add(threads, thread) < 0) { Py_DECREF(threads); return NULL; }
        last = thread;  /* a batch runs mostly on one thread: the same object again needs no add */
    }
    return Py_BuildValue("(OnN)", Py_True, spans, threads);
}

static PyMethodDef methods[] = {
    {"survey", survey, METH_O, "(every record a tuple, spans, thread idents) of a batch, or None."},
    {"configure", configure, METH_O, "Sets the record's length and the fields written in binary."},
    {"dumps", (PyCFunction)(void (*)(void))dumps, METH_FASTCALL,
     "A batch of records as bytes, or None where a record does not fit."},
    {"loads", loads, METH_O, "The (thread names, records) of bytes dumps() wrote."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module); }
