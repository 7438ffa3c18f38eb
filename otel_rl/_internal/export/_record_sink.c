/* The compiled twin of RecordSink's common case (record_sink.py).
 *
 * sink_records(records, thread_names, max_str, keep, slow, each, derive) walks one batch of
 * records in order. A record whose flat attributes need nothing but copying (plain ids,
 * attributes and args of str, int64, float and bool; no content keys; no events, links or
 * other library's scope) gets the dict ReadableBuilder.attributes gives it built here;
 * derive(record, attributes), when given, is the session processor's step for a record it
 * derives from (a span kind or a gauge value: phases, sessions), and returns the
 * attributes to go on with; for a phase or session span without a gauge, compiled(processor,
 * record, attributes, kind), the processor's compiled step, is tried first (None back: the
 * Python step's; an error is the processor's derive_failed() to report, as its own step
 * reports one). When sampled the record goes to the trace file as
 * the (record, attributes) pair the file processor keeps, and each(record, attributes), when
 * given, hands it to OTLP. keep(pairs, spans) hands the pairs on; every other record goes to
 * slow(record), the Python step, after the pairs before it were kept, so the file sees the
 * records in their order. A session with bundled phases is expanded where the walk comes to it
 * (expand_session: record.expand's records and span ids); with bundle(processor, session,
 * attributes, phase pairs) given (the session processor's derive_bundle), a plain session and its
 * phases are derived in one step and kept as one item (see sink_bundled).
 */
#include "../_cext.h"

static PyObject *baggage_keys, *k_thread_id, *k_thread_name, *k_category, *k_span_kind, *k_gauge;
static PyObject *kind_phase, *kind_session, *kind_task, *s_derive_failed;
static PyObject *args_prefix, *is_content_key;
static Py_ssize_t i_ids, i_thread, i_category, i_attributes, i_args, i_events, i_links, i_scope, i_flags, n_fields;
static PyObject *content_cache;  /* attribute key -> bool */
/* expand(): record.expand's pieces and the record's layout */
static PyObject *k_session_id, *py_phase, *py_phase_attributes, *py_expand, *getrandbits, *new_span_id, *phase_attrs;
static Py_ssize_t e_name, e_trace, e_span, e_parent, e_remote, e_state, e_start, e_end, e_kind, e_status, e_bundle;
#define MAX_FIELDS 64
static PyObject *arg_names;  /* args key -> "rl.args." + key */
#define MAX_CACHED 65536
#define SESSION_DERIVED_ROOM 5  /* total_s, and the time and count of two phases */

/* 1: a value copied as it is; 0: one the Python step must convert. */
static int plain_value(PyObject *v, Py_ssize_t max_str) {
    if (PyUnicode_CheckExact(v)) return PyUnicode_GET_LENGTH(v) <= max_str;
    if (PyFloat_CheckExact(v) || PyBool_Check(v)) return 1;
    long long x;
    return as_int64(v, &x);
}

/* The answers of content() for the key objects met last, by address: a batch's attribute
 * keys are a handful of objects met again and again (about 100 instructions a dict lookup, 8
 * a session's records). Each slot holds its key, so no other object takes its address. */
#define CONTENT_SLOTS 64
static struct { PyObject *key; int content; } content_seen[CONTENT_SLOTS];

static void content_seen_clear(void) {
    for (int k = 0; k < CONTENT_SLOTS; k++) Py_CLEAR(content_seen[k].key);
}

/* 1 when the key holds content (capture and redaction are the Python step's), -1 on error. */
static int content(PyObject *key) {
    size_t slot = ((size_t)key >> 4) % CONTENT_SLOTS;
    if (content_seen[slot].key == key) return content_seen[slot].content;
    PyObject *found = PyDict_GetItemWithError(content_cache, key);
    int r;
    if (found) {
        r = found == Py_True;
    } else {
        if (PyErr_Occurred()) return -1;
        found = PyObject_CallOneArg(is_content_key, key);
        if (!found) return -1;
        r = PyObject_IsTrue(found);
        Py_DECREF(found);
        if (r >= 0 && PyDict_GET_SIZE(content_cache) < MAX_CACHED
            && PyDict_SetItem(content_cache, key, r ? Py_True : Py_False) < 0)
            r = -1;
        if (r < 0) return -1;
    }
    Py_XSETREF(content_seen[slot].key, Py_NewRef(key));
    content_seen[slot].content = r;
    return r;
}

static int put_attr(PyObject *attrs, PyObject *name, PyObject *value) {
    if (PyUnicode_CheckExact(value)) {
        int c = content(name);
        if (c) return c < 0 ? -1 : 0;
    }
    return PyDict_SetItem(attrs, name, value) < 0 ? -1 : 1;
}

/* flatten_attributes(prefix, values, attrs) for plain values: 1 done, 0 not plain, -1 error. */
static int flatten(PyObject *values, int args, PyObject *attrs, Py_ssize_t max_str) {
    if (values == Py_None) return 1;
    if (!PyDict_CheckExact(values)) return 0;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(values, &pos, &key, &value)) {
        if (value == Py_None) continue;
        if (!PyUnicode_CheckExact(key) || !plain_value(value, max_str)) return 0;
        PyObject *name = key;
        if (args) {
            name = PyDict_GetItemWithError(arg_names, key);
            if (name) {
                Py_INCREF(name);
            } else {
                if (PyErr_Occurred()) return -1;
                name = PyUnicode_Concat(args_prefix, key);
                if (!name) return -1;
                if (PyDict_GET_SIZE(arg_names) < MAX_CACHED && PyDict_SetItem(arg_names, key, name) < 0) {
                    Py_DECREF(name);
                    return -1;
                }
            }
        }
        int r = put_attr(attrs, name, value);
        if (args) Py_DECREF(name);
        if (r <= 0) return r;
    }
    return 1;
}

static Py_ssize_t size_of(PyObject *v) { return PyDict_CheckExact(v) ? PyDict_GET_SIZE(v) : 0; }

/* The attributes of rec (a new dict), or NULL: NULL without an error when it is not plain. */
static PyObject *attributes(PyObject *rec, PyObject *thread_names, Py_ssize_t max_str) {
    /* room for every item it may get: the ids, the thread's two, the category, attributes and
     * args, and for a session what the session processor adds (its total, each phase's time and
     * count), which would otherwise grow the dict once more */
    PyObject *given = PyTuple_GET_ITEM(rec, i_attributes);
    PyObject *kind = PyDict_CheckExact(given) ? PyDict_GetItemWithError(given, k_span_kind) : NULL;
    if (!kind && PyErr_Occurred()) return NULL;
    Py_ssize_t derived = kind && is_text(kind, kind_session) ? SESSION_DERIVED_ROOM : 0;
    PyObject *attrs = dict_for(size_of(PyTuple_GET_ITEM(rec, i_ids)) + 3 + size_of(given)
                               + size_of(PyTuple_GET_ITEM(rec, i_args)) + derived);
    if (!attrs) return NULL;
    int r = 1;
    PyObject *bag = PyTuple_GET_ITEM(rec, i_ids);
    if (bag != Py_None && (!PyDict_CheckExact(bag) || PyDict_GET_SIZE(bag))) {
        if (!PyDict_CheckExact(bag)) goto drop;
        /* The baggage keys in their order, each looked up; or, where the bag holds only them,
         * as the very key objects and in that order (as the caller's thread builds it), the
         * bag's own items. */
        Py_ssize_t n_keys = PyTuple_GET_SIZE(baggage_keys), pos = 0, next_key = 0, found = 0;
        PyObject *in_order[8], *values[8], *key, *value;
        while (n_keys <= 8 && PyDict_Next(bag, &pos, &key, &value)) {
            while (next_key < n_keys && PyTuple_GET_ITEM(baggage_keys, next_key) != key) next_key++;
            if (next_key == n_keys) break;
            in_order[found] = key;
            values[found++] = value;
            next_key++;
        }
        int as_bag = n_keys <= 8 && found == PyDict_GET_SIZE(bag);
        for (Py_ssize_t k = 0; k < (as_bag ? found : n_keys) && r == 1; k++) {
            key = as_bag ? in_order[k] : PyTuple_GET_ITEM(baggage_keys, k);
            value = as_bag ? values[k] : PyDict_GetItemWithError(bag, key);
            if (!value) { if (PyErr_Occurred()) goto drop; continue; }
            if (value == Py_None) continue;
            if (PyUnicode_CheckExact(value)) {
                /* text of ASCII digits came across a process: id_value makes it an int again */
                Py_ssize_t n = PyUnicode_GET_LENGTH(value);
                int digits = n > 0 && PyUnicode_IS_ASCII(value);
                const Py_UCS1 *s = PyUnicode_1BYTE_DATA(value);
                for (Py_ssize_t j = 0; j < n && digits; j++) digits = s[j] >= '0' && s[j] <= '9';
                if (digits) goto drop;
            } else if (!plain_value(value, PY_SSIZE_T_MAX)) {
                goto drop;
            }
            r = put_attr(attrs, key, value);
        }
        if (r <= 0) goto drop;
    }
    PyObject *thread = PyTuple_GET_ITEM(rec, i_thread);
    if (thread != Py_None) {
        PyObject *name = PyDict_GetItemWithError(thread_names, thread);
        if (!name) { if (PyErr_Occurred()) goto drop; goto drop; }
        if (!PyUnicode_CheckExact(name) || !PyUnicode_GET_LENGTH(name)) goto drop;
        if (PyDict_SetItem(attrs, k_thread_id, thread) < 0) goto drop;
        if ((r = put_attr(attrs, k_thread_name, name)) <= 0) goto drop;
    }
    PyObject *category = PyTuple_GET_ITEM(rec, i_category);
    if (category != Py_None && (r = put_attr(attrs, k_category, category)) <= 0) goto drop;
    if (given != Py_None && (r = flatten(given, 0, attrs, max_str)) <= 0) goto drop;
    PyObject *args = PyTuple_GET_ITEM(rec, i_args);
    if (args != Py_None && (r = flatten(args, 1, attrs, max_str)) <= 0) goto drop;
    return attrs;
drop:  /* an error is set if it failed, none if the record is not plain */
    Py_DECREF(attrs);
    return NULL;
}

static int truthy(PyObject *v) {  /* events or links: None or a list; anything else counts */
    if (v == Py_None) return 0;
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) return Py_SIZE(v) != 0;
    return 1;
}

/* The attributes the session processor's step gives rec (a new reference), or NULL on error. */
static PyObject *derived(PyObject *rec, PyObject *attrs, PyObject *derive, PyObject *compiled, PyObject *processor) {
    PyObject *kind = PyDict_GetItemWithError(attrs, k_span_kind);
    if (!kind && PyErr_Occurred()) return NULL;
    if (compiled && kind && is_text(kind, kind_task)) {
        /* SessionSpanProcessor.on_record derives nothing from a task span but a gauge value */
        int gauge = PyDict_Contains(attrs, k_gauge);
        if (gauge < 0) return NULL;
        if (!gauge) return Py_NewRef(attrs);
    }
    if (compiled && kind && (is_text(kind, kind_phase) || is_text(kind, kind_session))) {
        int gauge = PyDict_Contains(attrs, k_gauge);
        if (gauge < 0) return NULL;
        if (!gauge) {
            Py_INCREF(kind);
            PyObject *argv[4] = {processor, rec, attrs, kind};
            PyObject *got = PyObject_Vectorcall(compiled, argv, 4, NULL);
            if (!got) {
                PyObject *r = report_raised(processor, s_derive_failed, kind);
                got = NULL;
                if (r) {
                    Py_DECREF(r);
                    got = Py_NewRef(attrs);
                }
            } else if (got == Py_None) {
                Py_CLEAR(got);
                if (PyErr_Occurred()) { Py_DECREF(kind); return NULL; }
                Py_DECREF(kind);
                return PyObject_CallFunctionObjArgs(derive, rec, attrs, NULL);
            }
            Py_DECREF(kind);
            return got;
        }
    }
    return PyObject_CallFunctionObjArgs(derive, rec, attrs, NULL);
}

/* One walk over a batch: its arguments and the pairs gathered for the file so far. */
typedef struct {
    PyObject *thread_names, *keep, *slow, *each, *derive, *compiled, *processor, *bundle;
    Py_ssize_t max_str;
    PyObject *pairs;  /* owned */
    Py_ssize_t spans;  /* the spans those pairs hold */
} Walk;

/* Hands the pairs gathered so far to keep(pairs, spans); a new list in w->pairs. */
static int hand_on(Walk *w) {
    if (!PyList_GET_SIZE(w->pairs)) return 0;
    PyObject *spans = PyLong_FromSsize_t(w->spans);
    PyObject *r = spans ? PyObject_CallFunctionObjArgs(w->keep, w->pairs, spans, NULL) : NULL;
    Py_XDECREF(spans);
    if (!r) return -1;
    Py_DECREF(r);
    PyObject *fresh = PyList_New(0);
    if (!fresh) return -1;
    Py_SETREF(w->pairs, fresh);
    w->spans = 0;
    return 0;
}

/* Keeps item for the file (it holds `spans` spans); 0, or -1 on error. */
static int keep_item(Walk *w, PyObject *item, Py_ssize_t spans) {
    if (PyList_Append(w->pairs, item) < 0) return -1;
    w->spans += spans;
    return 0;
}

/* Whether rec is a record whose attributes attributes() may build: no events, links or other
 * library's scope (those take the span path). */
static int record_path(PyObject *rec) {
    return PyTuple_CheckExact(rec) && PyTuple_GET_SIZE(rec) == n_fields && !truthy(PyTuple_GET_ITEM(rec, i_events))
           && !truthy(PyTuple_GET_ITEM(rec, i_links)) && PyTuple_GET_ITEM(rec, i_scope) == Py_None
           && PyLong_CheckExact(PyTuple_GET_ITEM(rec, i_flags));
}

/* A plain record without a bundle: its attributes (built here when attrs is NULL; a new
 * reference taken over otherwise), derived, kept for the file and handed to OTLP. */
static int sink_one(Walk *w, PyObject *rec, PyObject *attrs) {
    if (!attrs && record_path(rec)) {
        attrs = attributes(rec, w->thread_names, w->max_str);
        if (!attrs && PyErr_Occurred()) return -1;
    }
    if (!attrs) {
        PyObject *r;
        if (hand_on(w) < 0 || !(r = PyObject_CallOneArg(w->slow, rec))) return -1;
        Py_DECREF(r);
        return 0;
    }
    if (w->derive && (PyDict_GetItemWithError(attrs, k_span_kind) || PyDict_GetItemWithError(attrs, k_gauge))) {
        PyObject *given = derived(rec, attrs, w->derive, w->compiled, w->processor);
        Py_DECREF(attrs);
        if (!given) return -1;
        if (!PyDict_CheckExact(given)) {
            Py_DECREF(given);
            PyErr_SetString(PyExc_TypeError, "derive() must return a dict");
            return -1;
        }
        attrs = given;
    } else if (PyErr_Occurred()) {
        Py_DECREF(attrs);
        return -1;
    }
    long flags = PyLong_AsLong(PyTuple_GET_ITEM(rec, i_flags));
    if (flags == -1 && PyErr_Occurred()) PyErr_Clear();
    if (flags & 1) {
        PyObject *pair = PyTuple_Pack(2, rec, attrs);
        if (!pair || keep_item(w, pair, 1) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(attrs);
            return -1;
        }
        Py_DECREF(pair);
    }
    if (w->each) {
        PyObject *r = PyObject_CallFunctionObjArgs(w->each, rec, attrs, NULL);
        if (!r) { Py_DECREF(attrs); return -1; }
        Py_DECREF(r);
    }
    Py_DECREF(attrs);
    return 0;
}

static int bundled(PyObject *rec);  /* below */
static int expand_session(PyObject *rec, PyObject *out);
static PyObject *expand_one(PyObject *rec);

/* Whether attrs, built for a record of the kind `kind`, take derive()'s compiled step. */
static int compiled_kind(PyObject *attrs, PyObject *kind) {
    PyObject *given = PyDict_GetItemWithError(attrs, k_span_kind);
    if (!given) return PyErr_Occurred() ? -1 : 0;
    if (!is_text(given, kind)) return 0;
    int gauge = PyDict_Contains(attrs, k_gauge);
    return gauge < 0 ? -1 : !gauge;
}

/* The attributes of phase record rec, made from those of an earlier phase of the same session
 * (first, whose attributes are `built`), or NULL (no error) where they may differ in more than its
 * own attributes dict's values: attributes() gives both the same baggage ids (expand_session
 * hands every phase the same dict), the same thread and name, no category or args, then each
 * one's own attributes in their order; with the same keys there, all of them kept (plain, not
 * None), a copy of built with those values set is what attributes() would build. */
static PyObject *phase_attributes_like(PyObject *first, PyObject *built, PyObject *rec, Py_ssize_t max_str) {
    PyObject *own = PyTuple_GET_ITEM(rec, i_attributes), *theirs = PyTuple_GET_ITEM(first, i_attributes);
    if (PyTuple_GET_ITEM(rec, i_ids) != PyTuple_GET_ITEM(first, i_ids)
        || PyTuple_GET_ITEM(rec, i_args) != Py_None || PyTuple_GET_ITEM(first, i_args) != Py_None
        || PyTuple_GET_ITEM(rec, i_category) != Py_None || PyTuple_GET_ITEM(first, i_category) != Py_None
        || !PyDict_CheckExact(own) || !PyDict_CheckExact(theirs) || PyDict_GET_SIZE(own) != PyDict_GET_SIZE(theirs))
        return NULL;
    PyObject *thread = PyTuple_GET_ITEM(rec, i_thread), *other = PyTuple_GET_ITEM(first, i_thread);
    if (thread != other) {
        long long a, b;
        if (!as_int64(thread, &a) || !as_int64(other, &b) || a != b) return NULL;
    }
    Py_ssize_t i = 0, j = 0;
    PyObject *key, *value, *their_key, *their_value;
    while (PyDict_Next(own, &i, &key, &value) && PyDict_Next(theirs, &j, &their_key, &their_value)) {
        if (key != their_key || value == Py_None || their_value == Py_None || !plain_value(value, max_str)) return NULL;
    }
    PyObject *attrs = PyDict_Copy(built);
    if (!attrs) return NULL;
    i = 0;
    while (PyDict_Next(own, &i, &key, &value)) {
        if (put_attr(attrs, key, value) <= 0) {  /* content, which the Python step takes (or an error, set) */
            Py_DECREF(attrs);
            return NULL;
        }
    }
    return attrs;
}

/* A session with its bundled phases (bundled(rec) == 1). Its phases and the session become the
 * records expand() makes of them (the same span ids, drawn in the same order); where the walk has
 * a bundle step (the session processor's derive_bundle) and every one of them is plain, they are
 * derived in one step and kept as one item, (session record, its attributes, ((phase record, its
 * attributes), ...)): what the file would get as the phases' pairs followed by the session's
 * (file_exporter.bundled_spans spells it out for an exporter that wants the pairs). Otherwise
 * each takes sink_one, in order. */
static int sink_bundled(Walk *w, PyObject *rec) {
    PyObject *records = PyList_New(0);
    if (!records || expand_session(rec, records) < 0) { Py_XDECREF(records); return -1; }
    Py_ssize_t n = PyList_GET_SIZE(records) - 1, k = 0;  /* the phases, then the session */
    PyObject *session = PyList_GET_ITEM(records, n), *built[65] = {NULL}, *pairs = NULL, *got = NULL;
    int r = 0;
    if (w->bundle && n <= 64) {
        int plain_all = 1;
        for (Py_ssize_t j = 0; j <= n && plain_all; j++) {
            PyObject *one = PyList_GET_ITEM(records, j);
            if (!record_path(one)) {
                plain_all = 0;
                break;
            }
            built[j] = j && j < n ? phase_attributes_like(PyList_GET_ITEM(records, 0), built[0], one, w->max_str) : NULL;
            if (!built[j] && !PyErr_Occurred()) built[j] = attributes(one, w->thread_names, w->max_str);
            if (!built[j]) {
                if (PyErr_Occurred()) { r = -1; goto done; }
                plain_all = 0;
                break;
            }
            int c = compiled_kind(built[j], j < n ? kind_phase : kind_session);
            if (c < 0) { r = -1; goto done; }
            plain_all = c;
        }
        if (plain_all) {
            if (!(pairs = PyTuple_New(n))) { r = -1; goto done; }
            for (Py_ssize_t j = 0; j < n; j++) {
                PyObject *pair = PyTuple_Pack(2, PyList_GET_ITEM(records, j), built[j]);
                if (!pair) { r = -1; goto done; }
                PyTuple_SET_ITEM(pairs, j, pair);
            }
            PyObject *argv[4] = {w->processor, session, built[n], pairs};
            got = PyObject_Vectorcall(w->bundle, argv, 4, NULL);
            if (!got) {
                PyObject *kind = Py_NewRef(kind_session);
                got = report_raised(w->processor, s_derive_failed, kind);
                Py_DECREF(kind);
                if (!got) { r = -1; goto done; }
                Py_SETREF(got, Py_NewRef(built[n]));
            }
            if (got != Py_None) {
                if (!PyDict_CheckExact(got)) {
                    PyErr_SetString(PyExc_TypeError, "derive_bundle() must return a dict");
                    r = -1;
                    goto done;
                }
                long flags = PyLong_AsLong(PyTuple_GET_ITEM(session, i_flags));
                if (flags == -1 && PyErr_Occurred()) PyErr_Clear();
                if (flags & 1) {
                    PyObject *item = PyTuple_Pack(3, session, got, pairs);
                    if (!item || keep_item(w, item, n + 1) < 0) { Py_XDECREF(item); r = -1; goto done; }
                    Py_DECREF(item);
                }
                for (Py_ssize_t j = 0; w->each && j <= n; j++) {
                    PyObject *one = j < n ? PyList_GET_ITEM(records, j) : session, *a = j < n ? built[j] : got;
                    PyObject *done_each = PyObject_CallFunctionObjArgs(w->each, one, a, NULL);
                    if (!done_each) { r = -1; goto done; }
                    Py_DECREF(done_each);
                }
                goto done;
            }
        }
    }
    /* One by one, with the attributes already built (and theirs alone: derive() may keep them) */
    Py_CLEAR(pairs);
    Py_CLEAR(got);
    for (k = 0; k <= n && r == 0; k++) {
        PyObject *attrs = built[k];
        built[k] = NULL;
        r = sink_one(w, PyList_GET_ITEM(records, k), attrs);
    }
done:
    for (Py_ssize_t j = 0; j <= n && j < 65; j++) Py_XDECREF(built[j]);
    Py_XDECREF(pairs);
    Py_XDECREF(got);
    Py_DECREF(records);
    return r;
}

/* sink_records(records, thread_names, max_str, keep, slow, each, derive, compiled, processor,
 * bundle) -> None: the records as the pipe carries them, sessions with their bundles (expanded
 * here) or without; bundle: derive_bundle, or None. */
static PyObject *sink_records(PyObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    if (nargs != 10 || !PyList_CheckExact(argv[0]) || !PyDict_CheckExact(argv[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "sink_records(records, thread_names, max_str, keep, slow, each, derive, compiled, processor, "
                        "bundle)");
        return NULL;
    }
    if (!baggage_keys || !py_expand) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    Walk w = {argv[1], argv[3], argv[4], argv[5] == Py_None ? NULL : argv[5], argv[6] == Py_None ? NULL : argv[6],
              argv[7] == Py_None ? NULL : argv[7], argv[8], argv[9] == Py_None ? NULL : argv[9], 0, NULL, 0};
    if (!w.derive || !w.compiled) w.bundle = NULL;  /* derive_bundle is the compiled step's */
    w.max_str = PyLong_AsSsize_t(argv[2]);
    if (w.max_str == -1 && PyErr_Occurred()) return NULL;
    if (!(w.pairs = PyList_New(0))) return NULL;
    PyObject *records = argv[0];
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(records); k++) {
        PyObject *rec = PyList_GET_ITEM(records, k);
        int kind = bundled(rec), r;
        if (kind == 0) {
            r = sink_one(&w, rec, NULL);
        } else if (kind == 1) {
            r = sink_bundled(&w, rec);
        } else {  /* record.expand's, one by one */
            PyObject *got = expand_one(rec);
            r = got ? 0 : -1;
            for (Py_ssize_t j = 0; got && j < PyList_GET_SIZE(got) && r == 0; j++)
                r = sink_one(&w, PyList_GET_ITEM(got, j), NULL);
            Py_XDECREF(got);
        }
        if (r < 0) goto failed;
    }
    if (hand_on(&w) < 0) goto failed;
    Py_DECREF(w.pairs);
    Py_RETURN_NONE;
failed:
    Py_DECREF(w.pairs);
    return NULL;
}

/* --- expand(records): record.expand ------------------------------------------------------------
 * Each session's bundled phases become records of their own, ahead of the session (which keeps no
 * bundle). A plain phase (not interrupted, no policy version) is built here with record.phase's
 * fields, drawing its span id from the same getrandbits; any other phase is record.phase's, and
 * a record of another shape record.expand's, so the ids come from the same stream in the same
 * order. */

/* record.phase_attributes(name): the shared dict, kept here too after the first call. */
static PyObject *phase_attributes(PyObject *name) {
    PyObject *attrs = PyDict_GetItemWithError(phase_attrs, name);
    if (attrs) return Py_NewRef(attrs);
    if (PyErr_Occurred()) return NULL;
    attrs = PyObject_CallOneArg(py_phase_attributes, name);
    if (attrs && PyDict_GET_SIZE(phase_attrs) < 4096 && PyDict_SetItem(phase_attrs, name, attrs) < 0) Py_CLEAR(attrs);
    return attrs;
}

/* A random nonzero span id: getrandbits(64) or new_span_id(), as record.phase draws it. */
static PyObject *draw_span_id(void) {
    PyObject *bits = PyLong_FromLong(64), *id = bits ? PyObject_CallOneArg(getrandbits, bits) : NULL;
    Py_XDECREF(bits);
    if (!id) return NULL;
    int zero = PyObject_Not(id);
    if (zero < 0) { Py_DECREF(id); return NULL; }
    if (zero) Py_SETREF(id, PyObject_CallNoArgs(new_span_id));
    return id;
}

/* A new record: values[k] at each index k, None where NULL. */
static PyObject *new_record(PyObject **values) {
    PyObject *out = PyTuple_New(n_fields);
    if (!out) return NULL;
    for (Py_ssize_t k = 0; k < n_fields; k++) PyTuple_SET_ITEM(out, k, Py_NewRef(values[k] ? values[k] : Py_None));
    return out;
}

/* The record of one bundled phase (a 7-tuple) of session rec, its baggage ids. */
static PyObject *phase_record(PyObject *rec, PyObject *ids, PyObject *phase) {
    PyObject **f = PySequence_Fast_ITEMS(phase);  /* name, start, end, thread, args, interrupted, version */
    if (f[5] != Py_None || f[6] != Py_None) {
        PyObject *argv[9] = {rec, ids, f[0], f[1], f[2], f[3], f[4], f[5], f[6]};
        return PyObject_Vectorcall(py_phase, argv, 9, NULL);
    }
    PyObject *attrs = phase_attributes(f[0]), *span_id = attrs ? draw_span_id() : NULL;
    PyObject *zero = span_id ? PyLong_FromLong(0) : NULL, *out = NULL;
    if (zero) {
        PyObject *values[MAX_FIELDS] = {NULL};
        values[e_name] = f[0];
        values[e_trace] = PyTuple_GET_ITEM(rec, e_trace);
        values[e_span] = span_id;
        values[e_parent] = PyTuple_GET_ITEM(rec, e_span);
        values[e_remote] = Py_False;
        values[i_flags] = PyTuple_GET_ITEM(rec, i_flags);
        values[e_state] = PyTuple_GET_ITEM(rec, e_state);
        values[e_start] = f[1];
        values[e_end] = f[2];
        values[e_kind] = zero;  /* SpanKind.INTERNAL */
        values[i_ids] = ids;
        values[i_thread] = f[3];
        values[i_attributes] = attrs;
        values[i_args] = f[4];
        values[e_status] = zero;  /* StatusCode.UNSET */
        out = new_record(values);
    }
    Py_XDECREF(zero);
    Py_XDECREF(attrs);
    Py_XDECREF(span_id);
    return out;
}

/* Whether rec is a session this file expands: a bundle of (session id, tuple of 7-tuples),
 * baggage ids a dict or nothing: 1; 0 without a bundle; 2 for record.expand to take. */
static int bundled(PyObject *rec) {
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields) return 2;
    PyObject *bundle = PyTuple_GET_ITEM(rec, e_bundle);
    if (bundle == Py_None) return 0;
    if (!PyTuple_CheckExact(bundle) || PyTuple_GET_SIZE(bundle) != 2) return 2;
    PyObject *phases = PyTuple_GET_ITEM(bundle, 1), *ids = PyTuple_GET_ITEM(rec, i_ids);
    if (!PyTuple_CheckExact(phases) || (ids != Py_None && !PyDict_CheckExact(ids))) return 2;
    if (!PyTuple_GET_SIZE(phases)) return 2;  /* an empty bundle (bundle() never makes one) */
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(phases); k++) {
        PyObject *one = PyTuple_GET_ITEM(phases, k);
        if (!PyTuple_CheckExact(one) || PyTuple_GET_SIZE(one) != 7) return 2;
    }
    return 1;
}

/* Appends rec's phases, then rec without its bundle, to out. */
static int expand_session(PyObject *rec, PyObject *out) {
    PyObject *bundle = PyTuple_GET_ITEM(rec, e_bundle), *phases = PyTuple_GET_ITEM(bundle, 1);
    PyObject *given = PyTuple_GET_ITEM(rec, i_ids);
    PyObject *ids = given != Py_None && PyDict_GET_SIZE(given) ? PyDict_Copy(given) : PyDict_New();
    if (!ids || PyDict_SetItem(ids, k_session_id, PyTuple_GET_ITEM(bundle, 0)) < 0) { Py_XDECREF(ids); return -1; }
    int r = 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(phases) && r == 0; k++) {
        PyObject *one = phase_record(rec, ids, PyTuple_GET_ITEM(phases, k));
        r = one && PyList_Append(out, one) == 0 ? 0 : -1;
        Py_XDECREF(one);
    }
    Py_DECREF(ids);
    if (r < 0) return -1;
    PyObject *values[MAX_FIELDS];
    for (Py_ssize_t k = 0; k < n_fields; k++) values[k] = PyTuple_GET_ITEM(rec, k);
    values[e_bundle] = NULL;
    PyObject *session = new_record(values);
    if (!session) return -1;
    r = PyList_Append(out, session);
    Py_DECREF(session);
    return r;
}

/* record.expand([rec]): a new list. */
static PyObject *expand_one(PyObject *rec) {
    PyObject *one = PyList_New(1), *got = NULL;
    if (one) {
        PyList_SET_ITEM(one, 0, Py_NewRef(rec));
        got = PyObject_CallOneArg(py_expand, one);
        Py_DECREF(one);
    }
    if (got && !PyList_CheckExact(got)) {
        PyErr_SetString(PyExc_TypeError, "record.expand() must return a list");
        Py_CLEAR(got);
    }
    return got;
}

static PyObject *expand(PyObject *self, PyObject *records) {
    if (!PyList_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "expand(records) takes a list");
        return NULL;
    }
    if (!py_expand) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < PyList_GET_SIZE(records); i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        int kind = bundled(rec), r = 0;
        if (kind == 0) {
            r = PyList_Append(out, rec);
        } else if (kind == 1) {
            r = expand_session(rec, out);
        } else {
            PyObject *got = expand_one(rec);
            r = got && PyList_SetSlice(out, PyList_GET_SIZE(out), PyList_GET_SIZE(out), got) == 0 ? 0 : -1;
            Py_XDECREF(got);
        }
        if (r < 0) Py_CLEAR(out);
    }
    return out;
}

/* configure(dict): the keys, record indices and content test sink_records uses. */
static PyObject *configure(PyObject *self, PyObject *config) {
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes a dict");
        return NULL;
    }
    PyObject *keys = NULL;
    if (take(config, "BAGGAGE_KEYS", &keys) || take(config, "THREAD_ID", &k_thread_id)
        || take(config, "THREAD_NAME", &k_thread_name) || take(config, "CATEGORY", &k_category)
        || take(config, "SPAN_KIND", &k_span_kind) || take(config, "GAUGE_VALUE", &k_gauge)
        || take(config, "KIND_PHASE", &kind_phase) || take(config, "KIND_SESSION", &kind_session)
        || take(config, "KIND_TASK", &kind_task)
        || take(config, "ARGS_PREFIX", &args_prefix) || take(config, "is_content_key", &is_content_key)
        || take_index(config, "IDS", &i_ids) || take_index(config, "THREAD", &i_thread)
        || take_index(config, "CATEGORY_FIELD", &i_category) || take_index(config, "ATTRIBUTES", &i_attributes)
        || take_index(config, "ARGS", &i_args) || take_index(config, "EVENTS", &i_events)
        || take_index(config, "LINKS", &i_links) || take_index(config, "SCOPE", &i_scope)
        || take_index(config, "FLAGS", &i_flags) || take_index(config, "fields", &n_fields)
        || take(config, "SESSION_ID", &k_session_id) || take(config, "phase", &py_phase)
        || take(config, "phase_attributes", &py_phase_attributes) || take(config, "expand", &py_expand)
        || take(config, "getrandbits", &getrandbits) || take(config, "new_span_id", &new_span_id)
        || take_index(config, "NAME", &e_name) || take_index(config, "TRACE_ID", &e_trace)
        || take_index(config, "SPAN_ID", &e_span) || take_index(config, "PARENT_ID", &e_parent)
        || take_index(config, "PARENT_REMOTE", &e_remote) || take_index(config, "TRACE_STATE", &e_state)
        || take_index(config, "START", &e_start) || take_index(config, "END", &e_end)
        || take_index(config, "KIND", &e_kind) || take_index(config, "STATUS", &e_status)
        || take_index(config, "BUNDLE", &e_bundle)) {
        Py_XDECREF(keys);
        return NULL;
    }
    Py_ssize_t used[] = {i_ids, i_thread, i_attributes, i_args, i_flags, e_name, e_trace, e_span, e_parent,
                         e_remote, e_state, e_start, e_end, e_kind, e_status, e_bundle};
    for (size_t k = 0; k < sizeof(used) / sizeof(used[0]); k++) {
        if (n_fields > MAX_FIELDS || used[k] >= n_fields) {
            Py_DECREF(keys);
            PyErr_SetString(PyExc_ValueError, "configure(): record indices must lie in a record of at most 64 fields");
            return NULL;
        }
    }
    if (!PyTuple_CheckExact(keys) || !PyUnicode_CheckExact(args_prefix)) {
        Py_DECREF(keys);
        PyErr_SetString(PyExc_TypeError, "configure(): BAGGAGE_KEYS must be a tuple, ARGS_PREFIX a str");
        return NULL;
    }
    Py_XSETREF(baggage_keys, keys);
    PyDict_Clear(content_cache);
    content_seen_clear();
    PyDict_Clear(arg_names);
    PyDict_Clear(phase_attrs);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "Sets the keys, record indices and content test sink_records() uses."},
    {"sink_records", (PyCFunction)(void (*)(void))sink_records, METH_FASTCALL,
     "Builds the attributes of a batch's plain records and keeps the sampled ones for the trace file."},
    {"expand", expand, METH_O, "record.expand(records): each session's bundled phases as records of their own."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_sink", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_sink(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (!(s_derive_failed = PyUnicode_InternFromString("derive_failed"))) { Py_DECREF(m); return NULL; }
    content_cache = PyDict_New();
    arg_names = PyDict_New();
    phase_attrs = PyDict_New();
    if (!content_cache || !arg_names || !phase_attrs) { Py_DECREF(m); return NULL; }
    return m;
}
