/* The compiled twin of the Chrome trace encoder's line writing (chrome_lines.py).
 *
 * complete(): a record's complete ("X") event as its JSON line, the bytes orjson writes for
 * the event dict the Python encoder builds (ChromeTraceEncoder._place). Anything this file
 * is not sure to write the same way (a key the args would hold twice, a value orjson would
 * refuse, text that is not valid UTF-8, links) returns None: the caller then builds the dict.
 *
 * join(): the lines of one batch (bytes lines as they are, dicts through the dumps function
 * given), with the line count and the set of pids, as file_exporter._join gives them.
 */
#include "../_cext.h"
#include "../_json.h"
#include "_chrome_lines.h"


/* Set by configure(). */
static PyObject *kind_names, *status_names, *arg_names, *dropped, *arg_name, *safe_value, *dumps;
static Py_ssize_t i_name, i_trace, i_span, i_parent, i_kind, i_status, i_desc, i_links, i_top;
static PyObject *fixed_keys;  /* args keys the encoder sets itself (a tuple of str) */
static PyObject *default_category;  /* the category a line does not write */
static PyObject *flow_name, *flow_category;
/* ,"name":<flow name>,"cat":<flow category>,"id":"0x as orjson writes them, made at configure():
 * the same for every flow line (two text values escaped again each line were a fifth of one). */
static char *flow_middle;
static Py_ssize_t flow_middle_len;
/* The last timestamp a flow line held, and its text. */
static PyObject *flow_ts;
static char flow_ts_text[48];
static Py_ssize_t flow_ts_len;
static unsigned long long local_flow_mix;
static PyObject *pid_key;

static int put_dumped(Buf *b, PyObject *v) {
    PyObject *raw = PyObject_CallOneArg(dumps, v);
    if (!raw) { PyErr_Clear(); return SKIP; }
    int r = SKIP;
    if (PyBytes_CheckExact(raw)) r = put(b, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw));
    Py_DECREF(raw);
    return r;
}

static int put_float(Buf *b, PyObject *v) {
    double x = PyFloat_AS_DOUBLE(v);
    return isfinite(x) ? put_double(b, x) : put_dumped(b, v);
}

/* scaled_text(v, scale): what put_scaled writes for (double)v / 10**scale, or None where it
 * leaves it to put_double (for the tests against float_text). */
static PyObject *scaled_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long v, scale;
    if (nargs != 2 || !as_int64(args[0], &v) || !as_int64(args[1], &scale)) {
        PyErr_SetString(PyExc_TypeError, "scaled_text(v, scale) takes two int64");
        return NULL;
    }
    Buf b;
    buf_init(&b);
    PyObject *out = NULL;
    int r = put_scaled(&b, v, (int)scale);
    if (r == 0) out = PyBytes_FromStringAndSize(b.p, b.n);
    else if (r == SKIP) out = Py_NewRef(Py_None);
    buf_free(&b);
    return out;
}

/* float_text(x): what complete() writes for the float x (for the tests against repr). */
static PyObject *float_text(PyObject *self, PyObject *v) {
    if (!PyFloat_CheckExact(v)) {
        PyErr_SetString(PyExc_TypeError, "float_text() takes a float");
        return NULL;
    }
    Buf b;
    buf_init(&b);
    PyObject *out = NULL;
    int r = put_float(&b, v);
    if (r == 0) out = PyBytes_FromStringAndSize(b.p, b.n);
    else if (r == SKIP) out = Py_NewRef(Py_None);
    buf_free(&b);
    return out;
}

/* An attribute value as chrome_args keeps it: as it is, or through json_safe_value. */
static int put_arg(Buf *b, PyObject *v) {
    int r = put_simple(b, v);
    if (r != SKIP) return r;
    PyObject *safe = PyObject_CallOneArg(safe_value, v);
    if (!safe) { PyErr_Clear(); return SKIP; }
    r = put_simple(b, safe);
    if (r == SKIP) r = put_dumped(b, safe);
    Py_DECREF(safe);
    return r;
}

/* Two exact strs equal? Called for every pair of a line's arg names: the
   lengths and the canonical (PEP 393) kinds settle nearly all of them. */
static int same_text(PyObject *a, PyObject *c) {
    if (a == c) return 1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    if (n != PyUnicode_GET_LENGTH(c) || PyUnicode_KIND(a) != PyUnicode_KIND(c)) return 0;
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(c), (size_t)n * PyUnicode_KIND(a)) == 0;
}

#define MAX_ARGS 64

/* What an attribute key becomes in the args, found once per key object: the same few keys
 * (interned by the records' producers) recur on every span, and their args name, its checks
 * and its escaped text (with the quotes and the colon) are the same each time. The entry holds
 * the key, so its address is not reused while cached; arg_name is a function of the key's text. */
enum { KEY_WRITE, KEY_DROPPED, KEY_SKIP };
typedef struct {
    PyObject *key;  /* strong; NULL: a free slot */
    PyObject *name;  /* strong: the args name (KEY_WRITE) */
    char *frag;  /* '"name":', PyMem */
    Py_ssize_t frag_len;
    int state;
    int renamed;  /* its name's text is not the key's: only then can two keys share a name */
} KeyEntry;
#define KEY_SLOTS 512  /* a power of two */
#define KEY_PROBES 8
static KeyEntry key_cache[KEY_SLOTS];

static void key_cache_clear(void) {
    for (int k = 0; k < KEY_SLOTS; k++) {
        KeyEntry *e = &key_cache[k];
        Py_CLEAR(e->key);
        Py_CLEAR(e->name);
        PyMem_Free(e->frag);
        e->frag = NULL;
    }
}

/* The args name of key as chrome_args finds it (a new reference), or NULL (error set). */
static PyObject *name_of(PyObject *key) {
    PyObject *name = PyDict_GetItemWithError(arg_names, key);
    if (name) return Py_NewRef(name);
    return PyErr_Occurred() ? NULL : PyObject_CallOneArg(arg_name, key);
}

/* Whether name is one of the keys the encoder sets itself. */
static int is_fixed(PyObject *name);

/* The slot of key, or the first free slot of its neighbourhood; NULL when neither. */
static KeyEntry *key_slot(PyObject *key) {
    size_t h = ((size_t)key >> 4) * 0x9E3779B97F4A7C15ULL;
    for (int probe = 0; probe < KEY_PROBES; probe++) {
        KeyEntry *e = &key_cache[(h + (size_t)probe) & (KEY_SLOTS - 1)];
        if (e->key == key || !e->key) return e;
    }
    return NULL;
}

/* The cached entry of key, filled on first sight; NULL when key is not cacheable here (the
 * caller takes the uncached way) or on error (set). */
static KeyEntry *key_entry(PyObject *key) {
    if (!PyUnicode_CheckExact(key)) return NULL;
    KeyEntry *e = key_slot(key);
    if (!e || e->key) return e;
    PyObject *name = name_of(key);  /* may run Python, and let another thread fill the slot */
    if (!name) return NULL;
    int state = name == dropped ? KEY_DROPPED : !PyUnicode_CheckExact(name) || is_fixed(name) ? KEY_SKIP : KEY_WRITE;
    char *frag = NULL;
    Py_ssize_t frag_len = 0;
    if (state == KEY_WRITE) {
        Buf b;
        buf_init(&b);
        int r = put_text(&b, name);
        if (r == 0) r = PUTS(&b, ":");
        if (r == SKIP) state = KEY_SKIP;
        else if (r == 0 && (frag = PyMem_Malloc((size_t)b.n))) { memcpy(frag, b.p, (size_t)b.n); frag_len = b.n; }
        buf_free(&b);
        if (r < 0 || (state == KEY_WRITE && !frag)) {
            if (r == 0) PyErr_NoMemory();
            Py_DECREF(name);
            return NULL;
        }
    }
    e = key_slot(key);
    if (!e || e->key) {  /* filled meanwhile */
        Py_DECREF(name);
        PyMem_Free(frag);
        return e;
    }
    e->key = Py_NewRef(key);
    e->name = name;
    e->frag = frag;
    e->frag_len = frag_len;
    e->state = state;
    e->renamed = !PyUnicode_CheckExact(name) || !same_text(name, key);
    return e;
}

/* The args of chrome_args(attrs), comma-separated; SKIP where a key would repeat. */
static int put_args(Buf *b, PyObject *attrs) {
    PyObject *seen[MAX_ARGS];
    int count = 0, r = 0, renamed = 0;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (r == 0 && PyDict_Next(attrs, &pos, &key, &value)) {
        Py_INCREF(key);
        Py_INCREF(value);
        KeyEntry *e = key_entry(key);
        PyObject *name = e ? Py_NewRef(e->name) : PyErr_Occurred() ? NULL : name_of(key);
        if (!name) {
            PyErr_Clear();
            r = SKIP;
        } else if (name == dropped) {
            Py_DECREF(name);
        } else if ((e && e->state == KEY_SKIP) || !PyUnicode_CheckExact(name) || count == MAX_ARGS
                   || (!e && is_fixed(name))) {
            Py_DECREF(name);
            r = SKIP;
        } else {
            seen[count++] = name;  /* held until the end: compared with later names */
            /* Distinct keys whose names are their own texts cannot collide: compared only
             * once a renamed (or uncached) name is among them. */
            renamed |= !e || e->renamed;
            for (int k = 0; renamed && k < count - 1 && r == 0; k++)
                if (same_text(seen[k], name)) r = SKIP;
            if (r == 0 && count > 1) r = PUTS(b, ",");
            if (r == 0) r = e ? put(b, e->frag, e->frag_len) : put_text(b, name);
            if (r == 0 && !e) r = PUTS(b, ":");
            if (r == 0) r = put_arg(b, value);
        }
        Py_DECREF(key);
        Py_DECREF(value);
    }
    for (int k = 0; k < count; k++) Py_DECREF(seen[k]);
    return r;
}

static int is_fixed(PyObject *name) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(fixed_keys); k++)
        if (same_text(PyTuple_GET_ITEM(fixed_keys, k), name)) return 1;
    return 0;
}

static int put_hex64(Buf *b, PyObject *v) {
    unsigned long long u;
    if (!as_uint64(v, &u)) return SKIP;
    char tmp[18];
    tmp[0] = tmp[17] = '"';
    hex64(tmp + 1, u);
    return put(b, tmp, 18);
}

/* names[code] for a truthy code, written as a JSON string. */
static int put_named(Buf *b, const char *key, Py_ssize_t keylen, PyObject *names, PyObject *code) {
    PyObject *name = PyDict_GetItemWithError(names, code);
    if (!name) { PyErr_Clear(); return SKIP; }
    if (!PyUnicode_CheckExact(name)) return SKIP;
    if (put(b, key, keylen) < 0) return -1;
    return put_text(b, name);
}

/* a: complete()'s arguments; dur: a[4]'s value (a[4] itself may be NULL: the placement module's
 * call, which has the double without a float object). */
static int write_complete(Buf *b, PyObject *const *a, double dur) {
    PyObject *rec = a[0], *attrs = a[1];
    int r;
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) <= i_top) return SKIP;
    if (attrs != Py_None && !PyDict_CheckExact(attrs)) return SKIP;
    PyObject *links = PyTuple_GET_ITEM(rec, i_links);
    if (links != Py_None && (r = PyObject_IsTrue(links)) != 0) return r < 0 ? -1 : SKIP;
    PyObject *name = PyTuple_GET_ITEM(rec, i_name);
    if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(a[2])) return SKIP;
    if (PUTS(b, "{\"ph\":\"X\",\"name\":") < 0) return -1;
    if ((r = put_text(b, name))) return r;
    if (!same_text(a[2], default_category)) {  /* the default is left out: readers assume it */
        if (PUTS(b, ",\"cat\":") < 0) return -1;
        if ((r = put_text(b, a[2]))) return r;
    }
    if (!PyFloat_CheckExact(a[3])) return SKIP;
    if (PUTS(b, ",\"ts\":") < 0) return -1;
    if ((r = put_float(b, a[3]))) return r;
    if (PUTS(b, ",\"dur\":") < 0) return -1;
    if ((r = isfinite(dur) ? put_double(b, dur) : a[4] ? put_dumped(b, a[4]) : SKIP)) return r;
    if (!PyLong_CheckExact(a[5]) || !PyLong_CheckExact(a[6])) return SKIP;
    if (PUTS(b, ",\"pid\":") < 0) return -1;
    if ((r = put_int(b, a[5]))) return r;
    if (PUTS(b, ",\"tid\":") < 0) return -1;
    if ((r = put_int(b, a[6]))) return r;
    if (PUTS(b, ",\"args\":{") < 0) return -1;
    int written = 0;
    if (attrs != Py_None && PyDict_GET_SIZE(attrs)) {
        if ((r = put_args(b, attrs))) return r;
        written = b->p[b->n - 1] != '{';
    }
    /* The ids under keys.TRACE_ARG_*: the trace's text (None on a root, whose span id is its
     * trace id), the span's, its parent's. */
    if (a[7] != Py_None) {
        if (!PyUnicode_CheckExact(a[7])) return SKIP;
        if (written ? PUTS(b, ",\"trace\":") : PUTS(b, "\"trace\":")) return -1;
        if ((r = put_text(b, a[7]))) return r;
        written = 1;
    }
    if (written ? PUTS(b, ",\"id\":") : PUTS(b, "\"id\":")) return -1;
    if ((r = put_hex64(b, PyTuple_GET_ITEM(rec, i_span)))) return r;
    PyObject *parent = PyTuple_GET_ITEM(rec, i_parent);
    if (!PyLong_CheckExact(parent)) return SKIP;
    if ((r = PyObject_IsTrue(parent)) < 0) return -1;
    if (r) {
        if (PUTS(b, ",\"parent\":") < 0) return -1;
        if ((r = put_hex64(b, parent))) return r;
    }
    PyObject *kind = PyTuple_GET_ITEM(rec, i_kind);
    if ((r = PyObject_IsTrue(kind)) < 0) return -1;
    if (r && (r = put_named(b, ",\"span.kind\":", 13, kind_names, kind))) return r;
    PyObject *code = PyTuple_GET_ITEM(rec, i_status);
    if ((r = PyObject_IsTrue(code)) < 0) return -1;
    if (r) {
        if ((r = put_named(b, ",\"status\":", 10, status_names, code))) return r;
        PyObject *desc = PyTuple_GET_ITEM(rec, i_desc);
        if ((r = PyObject_IsTrue(desc)) < 0) return -1;
        if (r) {
            if (!PyUnicode_CheckExact(desc)) return SKIP;
            if (PUTS(b, ",\"status.description\":") < 0) return -1;
            if ((r = put_text(b, desc))) return r;
        }
    }
    return PUTS(b, "}}");
}

static PyObject *complete_bytes(PyObject *const *args, double dur) {
    Buf b;
    buf_init(&b);
    int r = write_complete(&b, args, dur);
    PyObject *out = NULL;
    if (r == 0) out = PyBytes_FromStringAndSize(b.p, b.n);
    else if (r == SKIP) out = Py_NewRef(Py_None);
    buf_free(&b);
    return out;
}

/* complete(rec, attrs, cat, ts, dur, pid, tid, trace_text) -> bytes or None */
static PyObject *complete(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "complete() takes 8 arguments");
        return NULL;
    }
    if (!dumps) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    if (!PyFloat_CheckExact(args[4])) Py_RETURN_NONE;
    return complete_bytes(args, PyFloat_AS_DOUBLE(args[4]));
}

/* complete() for the placement module (through API): the duration as a double, no call. */
static PyObject *complete_c(PyObject *rec, PyObject *attrs, PyObject *cat, PyObject *ts, double dur, PyObject *pid,
                            PyObject *tid, PyObject *trace) {
    if (!dumps) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *args[8] = {rec, attrs, cat, ts, NULL, pid, tid, trace};
    return complete_bytes(args, dur);
}

/* The pid of a line complete() wrote: the first ',"pid":' is the key (a quote inside a
 * string is always escaped, so the name and category cannot hold that sequence). */
static int line_pid(const char *s, Py_ssize_t n, long long *pid) {
    static const char key[] = ",\"pid\":";
    const Py_ssize_t klen = sizeof(key) - 1;
    const char *at = s, *end = s + n;
    /* from comma to comma: the key follows the name, category, ts and dur */
    while ((at = memchr(at, ',', (size_t)(end - at))) && (end - at < klen || memcmp(at, key, klen) != 0)) at++;
    if (!at) return 0;
    Py_ssize_t k = at - s + klen;
    int neg = k < n && s[k] == '-';
    if (neg) k++;
    if (k >= n || s[k] < '0' || s[k] > '9') return 0;
    long long v = 0;
    while (k < n && s[k] >= '0' && s[k] <= '9') v = v * 10 + (s[k++] - '0');
    *pid = neg ? -v : v;
    return 1;
}

/* join(events, dumps_event) -> (bytearray of lines, line count, set of pids) */
static PyObject *join(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "join() takes a list and a function");
        return NULL;
    }
    PyObject *events = args[0], *dump = args[1];
    PyObject *pids = PySet_New(NULL);
    if (!pids) return NULL;
    Buf b;
    buf_init(&b);
    Py_ssize_t lines = 0;
    long long last = 0;  /* the pid of the latest line, already in the set (a batch is mostly one process) */
    int have_last = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(events); k++) {
        PyObject *event = PyList_GET_ITEM(events, k);
        Py_INCREF(event);
        PyObject *pid = NULL;
        int ok = 0;
        if (PyBytes_CheckExact(event)) {
            long long v;
            ok = put(&b, PyBytes_AS_STRING(event), PyBytes_GET_SIZE(event)) == 0 && PUTS(&b, "\n") == 0;
            if (ok && line_pid(PyBytes_AS_STRING(event), PyBytes_GET_SIZE(event), &v) && !(have_last && v == last)) {
                pid = PyLong_FromLongLong(v);
                ok = pid != NULL;
                last = v;
                have_last = ok;
            }
        } else {
            PyObject *line = PyObject_CallOneArg(dump, event);
            if (line == Py_None) {  /* an event nothing can write (counted by dumps_event) */
                Py_DECREF(line);
                Py_DECREF(event);
                continue;
            }
            if (line && !PyBytes_Check(line)) {
                PyErr_SetString(PyExc_TypeError, "dumps_event must return bytes");
            } else if (line) {
                ok = put(&b, PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line)) == 0 && PUTS(&b, "\n") == 0;
            }
            Py_XDECREF(line);
            if (ok) {
                PyObject *got;
                if (PyDict_CheckExact(event)) got = Py_XNewRef(PyDict_GetItemWithError(event, pid_key));
                else got = PyObject_CallMethod(event, "get", "s", "pid");
                if (!got && PyErr_Occurred()) ok = 0;
                else if (got && PyLong_CheckExact(got)) pid = got;
                else Py_XDECREF(got);
            }
        }
        Py_DECREF(event);
        if (!ok) goto failed;
        lines++;
        if (pid) {
            int r = PySet_Add(pids, pid);
            Py_DECREF(pid);
            if (r < 0) goto failed;
        }
    }
    PyObject *body = PyByteArray_FromStringAndSize(b.p, b.n);
    buf_free(&b);
    if (!body) { Py_DECREF(pids); return NULL; }
    return Py_BuildValue("(NnN)", body, lines, pids);
failed:
    buf_free(&b);
    Py_DECREF(pids);
    return NULL;
}

/* configure(dict): the names, functions and record indices complete() reads. */
static PyObject *configure(PyObject *self, PyObject *config) {
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes a dict");
        return NULL;
    }
    if (take(config, "kind_names", &kind_names) || take(config, "status_names", &status_names)
        || take(config, "arg_names", &arg_names) || take(config, "dropped", &dropped)
        || take(config, "arg_name", &arg_name) || take(config, "json_safe_value", &safe_value)
        || take(config, "fixed_keys", &fixed_keys) || take(config, "DEFAULT_CATEGORY", &default_category)
        || take_index(config, "NAME", &i_name) || take_index(config, "TRACE_ID", &i_trace)
        || take_index(config, "SPAN_ID", &i_span) || take_index(config, "PARENT_ID", &i_parent)
        || take_index(config, "KIND", &i_kind) || take_index(config, "STATUS", &i_status)
        || take_index(config, "STATUS_DESC", &i_desc) || take_index(config, "LINKS", &i_links)
        || take(config, "dumps", &dumps) || take(config, "FLOW_NAME", &flow_name)
        || take(config, "FLOW_CATEGORY", &flow_category))
        return NULL;
    PyObject *mix = PyDict_GetItemString(config, "LOCAL_FLOW_MIX");
    if (!mix || !as_uint64(mix, &local_flow_mix)) {
        PyErr_SetString(PyExc_ValueError, "configure(): LOCAL_FLOW_MIX must be a uint64");
        return NULL;
    }
    if (!PyDict_CheckExact(kind_names) || !PyDict_CheckExact(status_names) || !PyDict_CheckExact(arg_names)
        || !PyTuple_CheckExact(fixed_keys) || !PyUnicode_CheckExact(default_category)
        || !PyUnicode_CheckExact(flow_name) || !PyUnicode_CheckExact(flow_category)) {
        Py_CLEAR(dumps);
        PyErr_SetString(PyExc_TypeError,
                        "configure(): names must be dicts, fixed_keys a tuple, the default category and flow names str");
        return NULL;
    }
    Py_ssize_t top = i_name;
    Py_ssize_t all[] = {i_trace, i_span, i_parent, i_kind, i_status, i_desc, i_links};
    for (int k = 0; k < 7; k++) if (all[k] > top) top = all[k];
    i_top = top;  /* a record shorter than this is left to the Python encoder */
    key_cache_clear();  /* the names and fixed keys may be others now */
    Buf b;
    buf_init(&b);
    int r = PUTS(&b, ",\"name\":") < 0 ? -1 : put_text(&b, flow_name);
    if (r == 0) r = PUTS(&b, ",\"cat\":") < 0 ? -1 : put_text(&b, flow_category);
    if (r == 0) r = PUTS(&b, ",\"id\":\"0x") < 0 ? -1 : 0;
    PyMem_Free(flow_middle);
    flow_middle = NULL;
    flow_middle_len = 0;
    if (r == 0 && (flow_middle = PyMem_Malloc(b.n ? b.n : 1))) {
        memcpy(flow_middle, b.p, b.n);
        flow_middle_len = b.n;
    }
    buf_free(&b);
    if (r < 0 || (r == 0 && !flow_middle)) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    /* r == SKIP (a flow name orjson would refuse): flows() leaves the lines to the encoder */
    Py_RETURN_NONE;
}

/* One end of a flow arrow as orjson writes the encoder's dict, after head (its "ph" and "bp"),
 * at place's pid, tid and ts. */
static int put_flow_end(Buf *b, const char *head, Py_ssize_t head_len, const char *id, PyObject *place) {
    PyObject *pid = PyTuple_GET_ITEM(place, 2), *tid = PyTuple_GET_ITEM(place, 3), *ts = PyTuple_GET_ITEM(place, 4);
    if (!PyFloat_CheckExact(ts) || !PyLong_CheckExact(pid) || !PyLong_CheckExact(tid)) return SKIP;
    int r;
    if (put(b, head, head_len) < 0 || put(b, flow_middle, flow_middle_len) < 0) return -1;
    if (put(b, id, 16) < 0 || PUTS(b, "\",\"ts\":") < 0) return -1;
    if (ts == flow_ts) {  /* a task's flows all start at its slice: its time written once */
        if (put(b, flow_ts_text, flow_ts_len) < 0) return -1;
    } else {
        Py_ssize_t at = b->n;
        if ((r = put_float(b, ts))) return r;
        if (b->n - at <= (Py_ssize_t)sizeof(flow_ts_text)) {
            flow_ts_len = b->n - at;
            memcpy(flow_ts_text, b->p + at, flow_ts_len);
            Py_XSETREF(flow_ts, Py_NewRef(ts));  /* held: no other float takes its address */
        }
    }
    if (PUTS(b, ",\"pid\":") < 0) return -1;
    if ((r = put_int(b, pid)) || PUTS(b, ",\"tid\":") < 0) return r ? r : -1;
    if ((r = put_int(b, tid)) || PUTS(b, "}") < 0) return r ? r : -1;
    return 0;
}

/* flows(child_id, parent, child, out): appends the two lines of the flow arrow from the parent's
 * slice to the child's (placements: (group, lane, pid, tid, ts)), what ChromeTraceEncoder._link
 * appends as dicts; True, or False with nothing appended where they are left to it. */
static PyObject *flows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "flows(child_id, parent, child, out)");
        return NULL;
    }
    PyObject *parent = args[1], *child = args[2];
    unsigned long long id;
    if (!flow_middle || !as_uint64(args[0], &id) || !PyTuple_Check(parent) || PyTuple_GET_SIZE(parent) < 5
        || !PyTuple_Check(child) || PyTuple_GET_SIZE(child) < 5)
        Py_RETURN_FALSE;
    char text[16];
    hex64(text, id ^ local_flow_mix);
    PyObject *lines[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        Buf b;
        buf_init(&b);
        int r = k == 0 ? put_flow_end(&b, "{\"ph\":\"s\"", 9, text, parent)
                       : put_flow_end(&b, "{\"ph\":\"f\",\"bp\":\"e\"", 18, text, child);
        if (r == 0) lines[k] = PyBytes_FromStringAndSize(b.p, b.n);
        buf_free(&b);
        if (r == SKIP) { Py_XDECREF(lines[0]); Py_RETURN_FALSE; }
        if (r < 0 || !lines[k]) { Py_XDECREF(lines[0]); return NULL; }
    }
    int r = PyList_Append(args[3], lines[0]) < 0 || PyList_Append(args[3], lines[1]) < 0 ? -1 : 0;
    Py_DECREF(lines[0]);
    Py_DECREF(lines[1]);
    if (r < 0) return NULL;
    Py_RETURN_TRUE;
}

/* --- the batch marker's checksum ------------------------------------------------------------
 * crc32(data): zlib.crc32(data), the CRC-32 of IEEE 802.3. zlib computes it a byte (or a few)
 * at a time, about 1.7 instructions a byte: a twentieth of the exporter's instructions on
 * sessions, whose lines it reads once more at each batch's end. Where the CPU multiplies
 * carry-less (PCLMULQDQ, x86-64 since 2010), 64-byte blocks are folded four 128-bit lanes at a
 * time and reduced to 32 bits (Barrett), about 0.1 instructions a byte; the constants are
 * powers of x modulo the polynomial (x^(4*128+32), x^(4*128-32), x^(128+32), x^(128-32),
 * x^64 and floor(x^64 / P), bit-reflected). The rest of a buffer, and a CPU without it, take
 * a byte at a time. has_crc_folding() says whether the folding is used (chrome_lines.crc32
 * leaves the buffer to zlib where it is not). */
static uint32_t crc_bytes[256];

static void crc_table_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_bytes[n] = c;
    }
}

static uint32_t crc_tail(uint32_t state, const unsigned char *p, size_t n) {
    while (n--) state = crc_bytes[(state ^ *p++) & 0xFF] ^ (state >> 8);
    return state;
}

static int crc_folding;  /* set at import where the CPU has it */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CRC_CAN_FOLD 1
#define CLMUL(a, b, imm) _mm_clmulepi64_si128((a), (b), (imm))
#define FOLD(x, k, next) _mm_xor_si128(_mm_xor_si128(CLMUL((x), (k), 0x11), (next)), CLMUL((x), (k), 0x00))

/* state (the inverted CRC so far) after len bytes of buf; len a multiple of 16, at least 64. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_fold(uint32_t state, const unsigned char *buf,
                                                                  size_t len) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)buf), x2 = _mm_loadu_si128((const __m128i *)(buf + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(buf + 32)), x4 = _mm_loadu_si128((const __m128i *)(buf + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)state));
    buf += 64;
    len -= 64;
    for (; len >= 64; buf += 64, len -= 64) {
        x1 = FOLD(x1, k1k2, _mm_loadu_si128((const __m128i *)buf));
        x2 = FOLD(x2, k1k2, _mm_loadu_si128((const __m128i *)(buf + 16)));
        x3 = FOLD(x3, k1k2, _mm_loadu_si128((const __m128i *)(buf + 32)));
        x4 = FOLD(x4, k1k2, _mm_loadu_si128((const __m128i *)(buf + 48)));
    }
    x1 = FOLD(x1, k3k4, x2);
    x1 = FOLD(x1, k3k4, x3);
    x1 = FOLD(x1, k3k4, x4);
    for (; len >= 16; buf += 16, len -= 16) x1 = FOLD(x1, k3k4, _mm_loadu_si128((const __m128i *)buf));
    /* 128 bits to 64 */
    x2 = CLMUL(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(CLMUL(_mm_and_si128(x1, low32), k5, 0x00), x2);
    /* 64 bits to 32 (Barrett) */
    x2 = _mm_and_si128(CLMUL(_mm_and_si128(x1, low32), poly, 0x10), low32);
    x1 = _mm_xor_si128(x1, CLMUL(x2, poly, 0x00));
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n) {
    uint32_t state = ~crc;
#ifdef CRC_CAN_FOLD
    if (crc_folding && n >= 64) {
        size_t m = n & ~(size_t)15;
        state = crc_fold(state, p, m);
        p += m;
        n -= m;
    }
#endif
    return ~crc_tail(state, p, n);
}

/* crc32(data, value=0): zlib.crc32(data, value) for a bytes-like data. */
static PyObject *crc32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long start = 0;
    if (nargs < 1 || nargs > 2 || (nargs == 2 && (!as_uint64(args[1], &start) || start > 0xFFFFFFFFULL))) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, value=0): a bytes-like object and a 32-bit value");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS  /* a batch is megabytes: other threads go on meanwhile */
    crc = crc_update((uint32_t)start, (const unsigned char *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *has_crc_folding(PyObject *self, PyObject *unused) { return PyBool_FromLong(crc_folding); }

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "Sets the names and functions complete() reads."},
    {"complete", (PyCFunction)(void (*)(void))complete, METH_FASTCALL,
     "A record's complete event as its JSON line (bytes), or None where the Python encoder must build it."},
    {"float_text", float_text, METH_O, "The bytes complete() writes for a float."},
    {"scaled_text", (PyCFunction)(void (*)(void))scaled_text, METH_FASTCALL,
     "The bytes written for (double)v / 10**scale where its digits are known, or None."},
    {"flows", (PyCFunction)(void (*)(void))flows, METH_FASTCALL,
     "Appends a local flow arrow's two lines to a list: True, or False where the encoder must."},
    {"join", (PyCFunction)(void (*)(void))join, METH_FASTCALL,
     "The lines of a batch of events, the line count and the set of pids."},
    {"crc32", (PyCFunction)(void (*)(void))crc32, METH_FASTCALL, "zlib.crc32(data, value=0), folded where the CPU can."},
    {"has_crc_folding", has_crc_folding, METH_NOARGS, "Whether crc32() folds 64-byte blocks with PCLMULQDQ."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chrome_lines", NULL, -1, methods};

PyMODINIT_FUNC PyInit__chrome_lines(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    pid_key = PyUnicode_InternFromString("pid");
    if (!pid_key) { Py_DECREF(m); return NULL; }
    static ChromeLinesAPI api = {complete_c};
    PyObject *capsule = PyCapsule_New(&api, CHROME_LINES_API, NULL);
    if (!capsule || PyModule_AddObject(m, "API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    crc_table_init();
#ifdef CRC_CAN_FOLD
    __builtin_cpu_init();
    crc_folding = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    return m;
}
