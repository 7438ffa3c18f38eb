/* What otel_rl's compiled twins share: a growable byte buffer, and reading the dict each
 * module's configure() takes (so a key the Python side forgot fails loudly, by name). */
#ifndef OTEL_RL_CEXT_H
#define OTEL_RL_CEXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

#endif
