/* The compiled twin of the Chrome trace encoder's lane placement (chrome_place.py, chrome_trace.py).
 *
 * encode_records(encoder, items, out, slow) walks one batch of (record, flat attributes)
 * pairs in order. A span that simply follows what its thread's first open lane already
 * holds (no session to wait for, no children placed before it, no flows to draw, no
 * counter, no events) is placed here, with the effects ChromeTraceEncoder._add and _place
 * have on the encoder's state, and its line comes from _chrome_lines.complete(). Any other
 * item goes, in order, to add_span below (a record, once the encoder has its process) or to
 * slow(item, out), the encoder's own Python step. The checks come before any change, so an
 * item handed on has changed nothing. A bundled session (session record, attributes, its phases'
 * pairs) is its phases' pairs and then its own (add_bundle).
 *
 * The lanes' state lives in Python objects with __slots__ (lanes.py); their slots are read
 * through the offsets of the classes' member descriptors, found once in configure().
 */
#include "../_cext.h"
#include "_chrome_lines.h"
#include <math.h>

static PyObject *complete_fn;  /* _chrome_lines.complete */
static ChromeLinesAPI *lines_api;  /* its C entry */
static PyObject *flows_fn;  /* _chrome_lines.flows */
static PyTypeObject *t_map, *t_lane, *t_level, *t_group, *t_proc;
static Py_ssize_t o_map_cap, o_map_young, o_map_old;
static Py_ssize_t o_lane_index, o_lane_tid, o_lane_root, o_lane_count, o_lane_max_end, o_lane_pruned,
    o_lane_next;
static Py_ssize_t o_level_starts, o_level_ends, o_level_ids, o_level_kids;
static Py_ssize_t o_group_lanes, o_group_used;
static Py_ssize_t o_proc_pid, o_proc_groups;
static PyObject *k_span_kind, *k_session_id, *k_thread_id, *k_gauge, *k_context_sent, *k_category;
static PyObject *kind_counter, *kind_instant, *kind_session, *default_cat;
static long client_kind, producer_kind;
static Py_ssize_t i_trace, i_span, i_parent, i_remote, i_start, i_end, i_kind, i_events, i_links, n_fields;
static Py_ssize_t i_name, i_attributes;
static PyObject *phase_attributes;  /* record's shared attributes of the bundled phases, by name */
static Py_ssize_t max_waiting;
static PyObject *one, *thousand, *hex_spec, *s_shorten, *s_release_stale;
static PyObject *a_placed, *a_parent_of, *a_waiting, *a_buffered, *a_newest_end, *a_clock, *a_trace_hex,
    *a_record_proc, *a_horizon, *a_max_intervals, *a_prune_step;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static void set_slot(PyObject *obj, Py_ssize_t off, PyObject *value) {
    Py_XSETREF(SLOT(obj, off), value);  /* takes the reference */
}

/* --- TwoGenerationMap ----------------------------------------------------------------- */
static PyObject *map_get(PyObject *m, PyObject *key) {  /* borrowed, NULL when absent or on error */
    PyObject *young = SLOT(m, o_map_young), *old = SLOT(m, o_map_old);
    if (!young || !old) return NULL;
    PyObject *v = PyDict_GetItemWithError(young, key);
    if (v == NULL || v == Py_None) {
        if (PyErr_Occurred()) return NULL;
        v = PyDict_GetItemWithError(old, key);
    }
    return v == Py_None ? NULL : v;
}

static int map_has(PyObject *m, PyObject *key) {
    PyObject *young = SLOT(m, o_map_young), *old = SLOT(m, o_map_old);
    int r = PyDict_Contains(young, key);
    return r ? r : PyDict_Contains(old, key);
}

static int map_set(PyObject *m, PyObject *key, PyObject *value) {
    PyObject *young = SLOT(m, o_map_young);
    if (PyDict_SetItem(young, key, value) < 0) return -1;
    Py_ssize_t cap = PyLong_AsSsize_t(SLOT(m, o_map_cap));
    if (cap == -1 && PyErr_Occurred()) return -1;
    if (PyDict_GET_SIZE(young) >= cap) {
        PyObject *fresh = PyDict_New();
        if (!fresh) return -1;
        set_slot(m, o_map_old, Py_NewRef(young));
        set_slot(m, o_map_young, fresh);
    }
    return 0;
}

static int map_empty(PyObject *m) {
    PyObject *young = SLOT(m, o_map_young), *old = SLOT(m, o_map_old);
    return PyDict_GET_SIZE(young) == 0 && PyDict_GET_SIZE(old) == 0;
}

/* The encoder's attributes that are set once (its maps and bounds in __init__, the line writer
 * in set_resource) and never during a batch: encode_records reads each at most once per call
 * for the spans it hands on, rather than once per span; its Python callbacks only change
 * what these objects hold. Anything else is the encoder's attribute, read where it is used. */
static PyObject *a_foreign, *a_session_lane, *a_max_buffered, *a_session_wait,
    *a_complete_line;  /* interned below */
#define N_FIXED 9
static PyObject **const fixed_names[N_FIXED] = {&a_placed, &a_parent_of, &a_waiting, &a_buffered, &a_foreign,
                                                &a_session_lane, &a_complete_line, &a_max_buffered,
                                                &a_session_wait};
typedef struct Fixed {
    PyObject *enc;  /* borrowed: encode_records holds it */
    PyThreadState *thread;  /* the thread running that call */
    PyObject *values[N_FIXED];  /* new references, fetched on first use */
    void *batch;  /* the walk's Batch (below): the encoder's live clock, newest end and trace text */
    struct Fixed *outer;  /* the walk begun before it, on any thread (a callback may switch threads) */
} Fixed;
static Fixed *fixed_now;  /* the walks under way, latest first */

static Fixed *walk_of(PyObject *enc) {  /* the latest walk over enc on this thread, or NULL */
    PyThreadState *thread = PyThreadState_Get();
    for (Fixed *f = fixed_now; f; f = f->outer)
        if (f->enc == enc && f->thread == thread) return f;
    return NULL;
}

static PyObject *attr(PyObject *obj, PyObject *name) {
    Fixed *f = walk_of(obj);
    for (int k = 0; f && k < N_FIXED; k++) {
        if (*fixed_names[k] != name) continue;
        if (!f->values[k] && !(f->values[k] = PyObject_GetAttr(obj, name))) return NULL;
        return Py_NewRef(f->values[k]);
    }
    return PyObject_GetAttr(obj, name);
}

static void fixed_enter(Fixed *f, PyObject *enc) {
    memset(f, 0, sizeof(*f));
    f->enc = enc;
    f->thread = PyThreadState_Get();
    f->outer = fixed_now;
    fixed_now = f;
}

static void fixed_leave(Fixed *f) {
    /* Unlinked wherever it is: another thread's walk may have begun after it and still run. */
    for (Fixed **at = &fixed_now; *at; at = &(*at)->outer) {
        if (*at == f) {
            *at = f->outer;
            break;
        }
    }
    for (int k = 0; k < N_FIXED; k++) Py_CLEAR(f->values[k]);
}

/* --- one batch -------------------------------------------------------------------------- */
typedef struct {
    PyObject *enc, *out;
    PyObject *placed, *parent_of, *waiting, *buffered, *proc;  /* new references */
    PyObject *horizon, *max_intervals, *prune_step;
    long long clock, newest;
    PyObject *trace_id, *trace_hex;  /* new references: the latest trace id and its text */
    int dirty;  /* whether the walk changed clock, newest or the trace text since load() */
} Batch;

static int load(Batch *b) {  /* the encoder's state that Python may have changed */
    PyObject *v;
    long long x = 0;
    if (!(v = PyObject_GetAttr(b->enc, a_clock))) return -1;
    int ok = as_int64(v, &x);
    Py_DECREF(v);
    b->clock = x;
    if (!(v = PyObject_GetAttr(b->enc, a_newest_end))) return -1;
    ok = ok && as_int64(v, &x);
    Py_DECREF(v);
    b->newest = x;
    if (!ok) { PyErr_SetString(PyExc_OverflowError, "encoder clock out of range"); return -1; }
    if (!(v = PyObject_GetAttr(b->enc, a_trace_hex))) return -1;
    if (!PyTuple_CheckExact(v) || PyTuple_GET_SIZE(v) != 2) {
        Py_DECREF(v);
        PyErr_SetString(PyExc_TypeError, "_trace_hex must be a pair");
        return -1;
    }
    Py_XSETREF(b->trace_id, Py_NewRef(PyTuple_GET_ITEM(v, 0)));
    Py_XSETREF(b->trace_hex, Py_NewRef(PyTuple_GET_ITEM(v, 1)));
    Py_DECREF(v);
    if (!(v = PyObject_GetAttr(b->enc, a_record_proc))) return -1;
    if (Py_TYPE(v) != t_proc) Py_CLEAR(v);  /* None until the first record made it */
    Py_XSETREF(b->proc, v);
    b->dirty = 0;
    return 0;
}

static int store(Batch *b) {  /* what this file changed, back into the encoder */
    if (!b->dirty) return 0;  /* the encoder holds these values already */
    b->dirty = 0;
    PyObject *v = PyLong_FromLongLong(b->clock);
    if (!v || PyObject_SetAttr(b->enc, a_clock, v) < 0) { Py_XDECREF(v); return -1; }
    Py_DECREF(v);
    v = PyLong_FromLongLong(b->newest);
    if (!v || PyObject_SetAttr(b->enc, a_newest_end, v) < 0) { Py_XDECREF(v); return -1; }
    Py_DECREF(v);
    v = PyTuple_Pack(2, b->trace_id, b->trace_hex);
    if (!v || PyObject_SetAttr(b->enc, a_trace_hex, v) < 0) { Py_XDECREF(v); return -1; }
    Py_DECREF(v);
    return 0;
}

/* The walk's batch for enc on this thread, or NULL outside a walk. While a walk runs, the
 * encoder's clock, newest end and trace text live in its Batch (the attributes are stale until
 * store()): add_span and what it calls read and change them there, and hand them back to the
 * attributes around each call into the encoder's Python (hand_out before, take_back after). */
static Batch *live(PyObject *enc) {
    Fixed *f = walk_of(enc);
    return f ? f->batch : NULL;
}

/* Hands the live state back to the encoder's attributes for a call into its Python, and
 * takes it back after: in between, the walk is not live, so C code that Python calls reads and
 * changes the attributes, which load() then reads. */
typedef struct { Fixed *fixed; Batch *batch; } Handover;

static int hand_out(PyObject *enc, Handover *h) {
    Fixed *f = walk_of(enc);
    h->fixed = f;
    h->batch = f ? f->batch : NULL;
    if (!h->batch) return 0;
    if (store(h->batch) < 0) {
        h->batch = NULL;
        return -1;
    }
    f->batch = NULL;
    return 0;
}

static int take_back(Handover *h) {  /* keeps an error already set */
    if (!h->batch) return 0;
    h->fixed->batch = h->batch;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int r = load(h->batch);
    if (type) {  /* the first error stands */
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    return r;
}

/* record.is_bundled_phase: a phase expanded from its session's bundle, whose span id no other
 * span can have as its parent, so no map keeps it (1 yes, 0 no; never an error). */
static int bundled_phase(PyObject *rec) {
    PyObject *attrs = PyTuple_GET_ITEM(rec, i_attributes), *name = PyTuple_GET_ITEM(rec, i_name);
    if (!phase_attributes || !PyDict_CheckExact(attrs) || !PyUnicode_CheckExact(name)) return 0;
    PyObject *shared = PyDict_GetItemWithError(phase_attributes, name);
    if (!shared && PyErr_Occurred()) PyErr_Clear();  /* a str key: never, in practice */
    return shared == attrs;
}

static int truthy_list(PyObject *v) {  /* events or links: None or a list, anything else counts */
    if (v == Py_None) return 0;
    if (PyList_CheckExact(v)) return PyList_GET_SIZE(v) != 0;
    return 1;
}

/* attrs.get(CATEGORY) or span_kind or "span", as _place picks a slice's category (borrowed;
 * NULL with an error set on failure). */
static PyObject *category(PyObject *attrs, PyObject *span_kind) {
    PyObject *cat = PyDict_GetItemWithError(attrs, k_category);
    if (!cat && PyErr_Occurred()) return NULL;
    int t = cat ? PyObject_IsTrue(cat) : 0;
    if (t > 0) return cat;
    if (t == 0) t = span_kind ? PyObject_IsTrue(span_kind) : 0;
    if (t < 0) return NULL;
    return t ? span_kind : default_cat;
}

/* ns / 1000 as Python's int division gives it: correctly rounded, ties to even. Below 2^53 both
 * are exact doubles, so one division rounds it. Above (a timestamp's start), the quotient q and
 * remainder r are exact, q + r/1000 lies in q's binade, and the double is q on the grid of that
 * binade's ulp plus r/1000 of a unit rounded to that grid, in integers (Python's own division,
 * its exact long algorithm, where q itself has more than 53 bits). */
static int micros_double(long long ns, double *out) {  /* 0 where only Python's division can */
    if (ns < (1LL << 53) && ns > -(1LL << 53)) {
        *out = (double)ns / 1000.0;
        return 1;
    }
    unsigned long long u = ns < 0 ? 0ULL - (unsigned long long)ns : (unsigned long long)ns;
    unsigned long long q = u / 1000, r = u % 1000;
    if (q >= (1ULL << 53)) return 0;
    /* q >= 2^53 / 1000 > 2^42 here */
    int shift = 52 - (63 - __builtin_clzll(q));  /* grid steps per unit: 2^shift, shift <= 10 */
    unsigned long long num = r << shift, m = (q << shift) + num / 1000, rem = num % 1000;
    if (rem > 500 || (rem == 500 && (m & 1))) m++;
    double x = (double)m / (double)(1ULL << shift);  /* exact: m < 2^53, a power of two */
    *out = ns < 0 ? -x : x;
    return 1;
}

static PyObject *micros(long long ns) {
    double x;
    if (micros_double(ns, &x)) return PyFloat_FromDouble(x);
    PyObject *d = PyLong_FromLongLong(ns), *out = d ? PyNumber_TrueDivide(d, thousand) : NULL;
    Py_XDECREF(d);
    return out;
}

/* writer(rec, attrs, cat, ts, micros(duration), pid, tid, trace): the line, or None where the
 * dict must give it; the line writer's C entry when writer is its complete() (no call, no float
 * object for the duration). */
static PyObject *complete_line(PyObject *writer, PyObject *rec, PyObject *attrs, PyObject *cat, PyObject *ts,
                               long long duration, PyObject *pid, PyObject *tid, PyObject *trace) {
    double d;
    if (writer == complete_fn && lines_api && micros_double(duration, &d))
        return lines_api->complete(rec, attrs, cat, ts, d, pid, tid, trace);
    PyObject *dur = micros(duration);
    if (!dur) return NULL;
    PyObject *call[8] = {rec, attrs, cat, ts, dur, pid, tid, trace};
    PyObject *line = PyObject_Vectorcall(writer, call, 8, NULL);
    Py_DECREF(dur);
    return line;
}

/* micros_of(ns): micros() for the tests against Python's int division. */
static PyObject *micros_of(PyObject *self, PyObject *v) {
    long long ns;
    if (!as_int64(v, &ns)) {
        PyErr_SetString(PyExc_TypeError, "micros_of() takes an int64");
        return NULL;
    }
    return micros(ns);
}

/* 1: placed; 0: not this file's (nothing changed); -1: a Python error. */
static int place(Batch *b, PyObject *item) {
    PyObject *proc = b->proc;
    if (!proc || !PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) return 0;
    PyObject *rec = PyTuple_GET_ITEM(item, 0), *attrs = PyTuple_GET_ITEM(item, 1);
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || !PyDict_CheckExact(attrs)) return 0;
    if (truthy_list(PyTuple_GET_ITEM(rec, i_events)) || truthy_list(PyTuple_GET_ITEM(rec, i_links))) return 0;

    PyObject *span_kind = PyDict_GetItemWithError(attrs, k_span_kind);
    if (span_kind) {
        if (!PyUnicode_CheckExact(span_kind)) return 0;
        if (PyUnicode_Compare(span_kind, kind_counter) == 0 || PyUnicode_Compare(span_kind, kind_instant) == 0
            || PyUnicode_Compare(span_kind, kind_session) == 0)
            return 0;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    if (PyDict_GetItemWithError(attrs, k_session_id) || PyDict_GetItemWithError(attrs, k_gauge)
        || PyDict_GetItemWithError(attrs, k_context_sent))
        return 0;
    if (PyErr_Occurred()) return -1;
    PyObject *thread = PyDict_GetItemWithError(attrs, k_thread_id);
    if (!thread || thread == Py_None) return PyErr_Occurred() ? -1 : 0;
    long long kind;
    if (!as_int64(PyTuple_GET_ITEM(rec, i_kind), &kind) || kind == client_kind || kind == producer_kind) return 0;
    PyObject *groups = SLOT(proc, o_proc_groups);
    if (!groups || !PyDict_CheckExact(groups)) return 0;
    PyObject *group = PyDict_GetItemWithError(groups, thread);
    if (!group || Py_TYPE(group) != t_group) return PyErr_Occurred() ? -1 : 0;

    PyObject *start_o = PyTuple_GET_ITEM(rec, i_start), *end_o = PyTuple_GET_ITEM(rec, i_end);
    PyObject *span_id = PyTuple_GET_ITEM(rec, i_span), *parent_id = PyTuple_GET_ITEM(rec, i_parent);
    long long start, end, parent;
    if (!as_int64(start_o, &start) || !as_int64(end_o, &end) || !PyLong_CheckExact(span_id)) return 0;
    if (!as_int64(parent_id, &parent)) {
        if (!PyLong_CheckExact(parent_id)) return 0;
        parent = 1;  /* an id past int64: not zero, which is all that is asked of it */
    }
    int remote = PyObject_IsTrue(PyTuple_GET_ITEM(rec, i_remote));
    if (remote < 0) return -1;
    if (parent && remote) return 0;  /* a flow from another process */
    PyObject *siblings = NULL;
    if (parent) {
        if (map_get(b->placed, parent_id)) return 0;  /* its parent is placed: Python picks the lane */
        if (PyErr_Occurred()) return -1;
        siblings = map_get(b->waiting, parent_id);
        if (PyErr_Occurred()) return -1;
        if (siblings && (!PyList_CheckExact(siblings) || PyList_GET_SIZE(siblings) >= max_waiting)) return 0;
    }
    if (!map_empty(b->waiting)) {
        int has = map_has(b->waiting, span_id);
        if (has) return has < 0 ? -1 : 0;  /* children wait for it */
    }

    PyObject *lanes = SLOT(group, o_group_lanes);
    if (!lanes || !PyList_CheckExact(lanes)) return 0;
    PyObject *chosen = NULL, *root = NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(lanes); k++) {
        PyObject *lane = PyList_GET_ITEM(lanes, k);
        if (Py_TYPE(lane) != t_lane) return 0;
        PyObject *pruned = SLOT(lane, o_lane_pruned);
        long long before;
        if (!pruned) return 0;
        if (PyFloat_CheckExact(pruned)) {
            double x = PyFloat_AS_DOUBLE(pruned);
            if (!(Py_IS_INFINITY(x) && x < 0)) return 0;
        } else if (!as_int64(pruned, &before)) {
            return 0;
        } else if (start < before) {
            continue;  /* Lane.insert refuses it without looking further */
        }
        PyObject *level = SLOT(lane, o_lane_root);
        if (!level || Py_TYPE(level) != t_level) return 0;
        PyObject *ends = SLOT(level, o_level_ends);
        if (!ends || !PyList_CheckExact(ends)) return 0;
        Py_ssize_t n = PyList_GET_SIZE(ends);
        long long last;
        if (n && (!as_int64(PyList_GET_ITEM(ends, n - 1), &last) || last > start)) return 0;  /* it would nest */
        chosen = lane;
        root = level;
        break;
    }
    if (!chosen) return 0;  /* a new lane: Python makes it */
    PyObject *placed_end = end < start ? start_o : end_o;
    long long end_c = end < start ? start : end;

    PyObject *pid = SLOT(proc, o_proc_pid), *tid = SLOT(chosen, o_lane_tid);
    if (!pid || !tid) return 0;
    PyObject *cat = category(attrs, span_kind);
    if (!cat) return -1;
    PyObject *trace_id = PyTuple_GET_ITEM(rec, i_trace), *text = Py_None;
    if (!PyLong_CheckExact(trace_id)) return 0;
    int is_root = same_value(trace_id, span_id);  /* its span id says it */
    if (is_root < 0) return -1;
    if (!is_root) {
        int same = same_value(b->trace_id, trace_id);
        if (same < 0) return -1;
        if (!same) {
            PyObject *fresh = trace_text(trace_id, hex_spec);
            if (!fresh) return -1;
            Py_SETREF(b->trace_id, Py_NewRef(trace_id));
            Py_SETREF(b->trace_hex, fresh);
            b->dirty = 1;
        }
        text = b->trace_hex;
    }
    PyObject *ts = micros(start);
    if (!ts) return -1;
    PyObject *line = complete_line(complete_fn, rec, attrs, cat, ts, end_c - start, pid, tid, text);
    if (!line) { Py_DECREF(ts); return -1; }
    if (line == Py_None) {  /* a line the dict must give */
        Py_DECREF(line);
        Py_DECREF(ts);
        return 0;
    }

    /* From here on it is placed: the changes _add and _place make, in their order. */
    int rc = -1;
    PyObject *record = NULL, *num = NULL;
    if (parent && map_set(b->parent_of, span_id, parent_id) < 0) goto done;
    if (end > b->newest) b->newest = end;
    b->clock++;
    b->dirty = 1;
    if (!(num = PyLong_FromLongLong(b->clock))) goto done;
    set_slot(group, o_group_used, num);
    num = NULL;
    PyObject *starts = SLOT(root, o_level_starts), *ends = SLOT(root, o_level_ends);
    PyObject *ids = SLOT(root, o_level_ids), *kids = SLOT(root, o_level_kids);
    if (!starts || !ids || !kids || !PyList_CheckExact(starts) || !PyList_CheckExact(ids) || !PyList_CheckExact(kids)) {
        PyErr_SetString(PyExc_TypeError, "a lane level without its lists");
        goto done;
    }
    if (PyList_Append(starts, start_o) < 0 || PyList_Append(ends, placed_end) < 0 || PyList_Append(ids, span_id) < 0
        || PyList_Append(kids, Py_None) < 0)
        goto done;
    long long count, max_end, next_prune;
    if (!as_int64(SLOT(chosen, o_lane_count), &count) || !as_int64(SLOT(chosen, o_lane_max_end), &max_end)
        || !as_int64(SLOT(chosen, o_lane_next), &next_prune)) {
        PyErr_SetString(PyExc_TypeError, "a lane's counts must be ints");
        goto done;
    }
    if (!(num = PyLong_FromLongLong(count + 1))) goto done;
    set_slot(chosen, o_lane_count, num);
    num = NULL;
    if (end_c > max_end) set_slot(chosen, o_lane_max_end, Py_NewRef(placed_end));
    if (count + 1 >= next_prune) {
        PyObject *r = PyObject_CallMethodObjArgs(chosen, s_shorten, b->horizon, b->max_intervals, b->prune_step, NULL);
        if (!r) goto done;
        Py_DECREF(r);
    }
    PyObject *index = SLOT(chosen, o_lane_index);
    if (!index) { PyErr_SetString(PyExc_TypeError, "a lane without its index"); goto done; }
    if (!(record = PyTuple_Pack(5, group, index, pid, tid, ts))) goto done;
    if (map_set(b->placed, span_id, record) < 0) goto done;
    if (parent) {
        PyObject *waiting_entry = PyTuple_Pack(6, group, index, pid, tid, ts, span_id);
        if (!waiting_entry) goto done;
        int r;
        if (siblings) {
            r = PyList_Append(siblings, waiting_entry);
        } else {
            PyObject *list = PyList_New(1);
            if (!list) { Py_DECREF(waiting_entry); goto done; }
            PyList_SET_ITEM(list, 0, Py_NewRef(waiting_entry));
            r = map_set(b->waiting, parent_id, list);
            Py_DECREF(list);
        }
        Py_DECREF(waiting_entry);
        if (r < 0) goto done;
    }
    if (PyList_Append(b->out, line) < 0) goto done;
    rc = 1;
done:
    Py_XDECREF(record);
    Py_DECREF(ts);
    Py_DECREF(line);
    return rc;
}

static void batch_clear(Batch *b) {
    Py_CLEAR(b->placed);
    Py_CLEAR(b->parent_of);
    Py_CLEAR(b->waiting);
    Py_CLEAR(b->buffered);
    Py_CLEAR(b->proc);
    Py_CLEAR(b->horizon);
    Py_CLEAR(b->max_intervals);
    Py_CLEAR(b->prune_step);
    Py_CLEAR(b->trace_id);
    Py_CLEAR(b->trace_hex);
}

static int get_map(PyObject *enc, PyObject *name, PyObject **slot) {
    PyObject *v = PyObject_GetAttr(enc, name);
    if (!v) return -1;
    if (Py_TYPE(v) != t_map) {
        Py_DECREF(v);
        PyErr_Format(PyExc_TypeError, "%U must be a TwoGenerationMap", name);
        return -1;
    }
    *slot = v;
    return 0;
}

static PyObject *add_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs);  /* below */
static PyObject *add_span_given(PyObject *enc, PyObject *rec, PyObject *attrs, PyObject *proc, PyObject *out,
                                PyObject *given, PyObject *const *pairs, Py_ssize_t n_pairs);  /* below */
static PyObject *s_encode_error;

/* The step for an item the walk does not take: a record goes to add_span once the encoder
 * has its process (a failure reported as _encode_one reports it), anything else to slow(). */
/* The encoder's _encode_error for the span add_span just failed to place (the error set now):
 * 1 reported, -1 when reporting failed. */
static int report_unplaced(Batch *b) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Handover h;
    int out = hand_out(b->enc, &h);
    PyErr_Restore(type, value, tb);
    PyObject *done = out < 0 ? NULL : report_raised(b->enc, s_encode_error, NULL);
    if (take_back(&h) < 0) Py_CLEAR(done);
    if (!done) return -1;
    Py_DECREF(done);
    return 1;
}

static int step(Batch *b, PyObject *item, PyObject *slow) {
    PyObject *done;
    if (b->proc && PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2) {
        /* add_span works on the batch's live state (see live()) */
        PyObject *argv[5] = {b->enc, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1), b->proc, b->out};
        done = add_span(NULL, argv, 5);
        if (done) {
            Py_DECREF(done);
            return 1;
        }
        return report_unplaced(b);
    } else {
        Handover h;
        if (hand_out(b->enc, &h) < 0) return -1;
        done = PyObject_CallFunctionObjArgs(slow, item, b->out, NULL);
        if (take_back(&h) < 0) Py_CLEAR(done);
    }
    if (!done) return -1;
    Py_DECREF(done);
    return 1;
}

static Py_ssize_t wait_as_one(Batch *b, PyObject *const *items, Py_ssize_t n_items, Py_ssize_t k,
                              Py_ssize_t *looked_to, PyObject **handoff);  /* below */

static int walk(Batch *b, PyObject *const *items, Py_ssize_t n_items, PyObject *slow);

/* A bundled session (file_exporter.bundled_spans): (session record, its attributes, its phases'
 * (record, attributes) pairs). Where wait_as_one would gather the phases for the session span
 * that comes next, they are handed to it straight away (add_span_given): placed as they would
 * be after waiting in _buffered, without waiting there. Otherwise the phases' pairs and then the
 * session's take the walk one by one. 0, or -1 on error. */
#define BUNDLE_MAX 64
static int add_bundle(Batch *b, PyObject *item, PyObject *slow) {
    PyObject *rec = PyTuple_GET_ITEM(item, 0), *attrs = PyTuple_GET_ITEM(item, 1), *phases = PyTuple_GET_ITEM(item, 2);
    if (!PyTuple_CheckExact(phases) || PyTuple_GET_SIZE(phases) > BUNDLE_MAX) {
        PyErr_SetString(PyExc_TypeError, "a bundled session's phases must be a tuple of at most 64 pairs");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(phases);
    PyObject *run[BUNDLE_MAX + 1], *session = PyTuple_Pack(2, rec, attrs), *waiting = NULL;
    if (!session) return -1;
    for (Py_ssize_t k = 0; k < n; k++) run[k] = PyTuple_GET_ITEM(phases, k);
    run[n] = session;
    Py_ssize_t looked_to, got = n && b->proc ? wait_as_one(b, run, n + 1, 0, &looked_to, &waiting) : 0;
    int r;
    if (got < 0) {
        r = -1;
    } else if (got == n && waiting) {  /* the phases' pairs themselves where wait_as_one made no list */
        PyObject *done = waiting == Py_None ? add_span_given(b->enc, rec, attrs, b->proc, b->out, NULL, run, n)
                                            : add_span_given(b->enc, rec, attrs, b->proc, b->out, waiting, NULL, 0);
        r = done ? 0 : report_unplaced(b) < 0 ? -1 : 0;
        Py_XDECREF(done);
    } else {
        r = walk(b, run, n + 1, slow);
    }
    Py_XDECREF(waiting);
    Py_DECREF(session);
    return r;
}

/* The walk over items (a batch, or a bundled session's spans), in order. */
static int walk(Batch *b, PyObject *const *items, Py_ssize_t n_items, PyObject *slow) {
    Py_ssize_t looked_to = 0;  /* wait_as_one found no run that starts before this index */
    for (Py_ssize_t k = 0; k < n_items; k++) {
        PyObject *item = Py_NewRef(items[k]);
        if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 3) {
            int r = add_bundle(b, item, slow);
            Py_DECREF(item);
            if (r < 0) return -1;
            continue;
        }
        int r = place(b, item);
        if (r == 1 && PyDict_GET_SIZE(b->buffered)) {
            Handover h;
            PyObject *done = hand_out(b->enc, &h) < 0 ? NULL : PyObject_CallMethodOneArg(b->enc, s_release_stale, b->out);
            if (take_back(&h) < 0) Py_CLEAR(done);
            if (!done) r = -1;
            else Py_DECREF(done);
        } else if (r == 0) {
            /* place() takes no span of a session (nor changes anything when it leaves one) */
            Py_ssize_t run = k < looked_to ? 0 : wait_as_one(b, items, n_items, k, &looked_to, NULL);
            if (run > 0) {  /* what waited is now under its session span, which comes next */
                k += run;
                Py_SETREF(item, Py_NewRef(items[k]));
            }
            r = run < 0 ? -1 : step(b, item, slow);
        }
        Py_DECREF(item);
        if (r < 0) return -1;
    }
    return 0;
}

/* encode_records(encoder, items, out, slow) -> None */
static PyObject *encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "encode_records(encoder, items, out, slow) takes two lists");
        return NULL;
    }
    if (!complete_fn) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    Batch b = {0};
    b.enc = args[0];
    b.out = args[2];
    PyObject *items = args[1], *slow = args[3];
    Fixed fixed;
    fixed_enter(&fixed, b.enc);
    if (get_map(b.enc, a_placed, &b.placed) || get_map(b.enc, a_parent_of, &b.parent_of)
        || get_map(b.enc, a_waiting, &b.waiting) || !(b.buffered = PyObject_GetAttr(b.enc, a_buffered))
        || !(b.horizon = PyObject_GetAttr(b.enc, a_horizon))
        || !(b.max_intervals = PyObject_GetAttr(b.enc, a_max_intervals))
        || !(b.prune_step = PyObject_GetAttr(b.enc, a_prune_step)) || load(&b) < 0)
        goto failed;
    fixed.batch = &b;
    if (!PyDict_CheckExact(b.buffered)) {
        PyErr_SetString(PyExc_TypeError, "_buffered must be a dict");
        goto failed;
    }
    if (walk(&b, ((PyListObject *)items)->ob_item, PyList_GET_SIZE(items), slow) < 0) goto failed;
    if (store(&b) < 0) goto failed;
    batch_clear(&b);
    fixed_leave(&fixed);
    Py_RETURN_NONE;
failed:
    if (fixed.batch) {  /* what the walk changed before the error stays the encoder's */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (store(&b) < 0) PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    batch_clear(&b);
    fixed_leave(&fixed);
    return NULL;
}

/* --- any span: ChromeTraceEncoder._place ------------------------------------------------------
 * place_span(encoder, rec, proc, attrs, out, prefer) -> (group, lane index), what _place returns,
 * with its effects. Lanes nest here (Lane.insert, every case); what is rare and makes event dicts
 * (a new thread or lane, a line the dict must give, gauges and events, flows) is the encoder's
 * own Python, called back. */
static PyObject *s_group, *s_new_lane, *s_slice, *s_link, *s_extras, *s_remote_flow, *s_flow_source,
    *s_flows_dropped, *a_complete_line;

static int ll_at(PyObject *list, Py_ssize_t k, long long *x) {
    if (as_int64(PyList_GET_ITEM(list, k), x)) return 0;
    PyErr_SetString(PyExc_TypeError, "lane times must be int64");
    return -1;
}

/* The first index in [lo, len) whose value is > x (right) or >= x (left), as bisect does. */
static int bisect_ll(PyObject *list, long long x, Py_ssize_t lo, int right, Py_ssize_t *at) {
    Py_ssize_t hi = PyList_GET_SIZE(list);
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        long long v;
        if (ll_at(list, mid, &v) < 0) return -1;
        if (right ? x < v : !(v < x)) hi = mid;
        else lo = mid + 1;
    }
    *at = lo;
    return 0;
}

/* lanes.is_ancestor: whether `ancestor` is `span` or one of its ancestors (64 generations); the
 * parent of `own` (when not NULL) is `own_parent`, which parent_of does not hold. */
static int is_ancestor(PyObject *parent_of, PyObject *ancestor, PyObject *span, PyObject *own, PyObject *own_parent) {
    for (int depth = 0; depth < 64; depth++) {
        int eq = same_value(span, ancestor);
        if (eq) return eq;
        span = own && span == own ? own_parent : map_get(parent_of, span);
        if (!span) return PyErr_Occurred() ? -1 : 0;
        int t = PyObject_IsTrue(span);
        if (t <= 0) return t;
    }
    return 0;
}

static int level_lists(PyObject *level, PyObject **starts, PyObject **ends, PyObject **ids, PyObject **kids) {
    if (Py_TYPE(level) != t_level) goto bad;
    *starts = SLOT(level, o_level_starts);
    *ends = SLOT(level, o_level_ends);
    *ids = SLOT(level, o_level_ids);
    *kids = SLOT(level, o_level_kids);
    if (*starts && *ends && *ids && *kids && PyList_CheckExact(*starts) && PyList_CheckExact(*ends)
        && PyList_CheckExact(*ids) && PyList_CheckExact(*kids))
        return 0;
bad:
    PyErr_SetString(PyExc_TypeError, "a lane level without its lists");
    return -1;
}

static int replace_slice(PyObject *list, Py_ssize_t i, Py_ssize_t j, PyObject *value) {
    PyObject *one = PyList_New(1);
    if (!one) return -1;
    PyList_SET_ITEM(one, 0, Py_NewRef(value));
    int r = PyList_SetSlice(list, i, j, one);
    Py_DECREF(one);
    return r;
}

/* LaneLevel(), its four empty lists made here rather than by its __init__ in Python. */
static PyObject *new_level(void) {
    PyObject *level = t_level->tp_alloc(t_level, 0);
    if (!level) return NULL;
    Py_ssize_t offs[4] = {o_level_starts, o_level_ends, o_level_ids, o_level_kids};
    for (int k = 0; k < 4; k++) {
        PyObject *list = PyList_New(0);
        if (!list) { Py_DECREF(level); return NULL; }
        SLOT(level, offs[k]) = list;
    }
    return level;
}

/* lanes.unpack_leaves: the level a packed one holds (start, end: int64; span id: uint64; each
 * little-endian), its ints made anew. */
#define PACKED_SIZE 24

static unsigned long long get_le64(const unsigned char *p) {
    unsigned long long v = 0;
    for (int k = 7; k >= 0; k--) v = v << 8 | p[k];
    return v;
}

static void put_le64(unsigned char *p, unsigned long long v) {
    for (int k = 0; k < 8; k++, v >>= 8) p[k] = (unsigned char)(v & 0xFF);
}

static PyObject *unpack_leaves(PyObject *data) {
    PyObject *level = new_level(), *starts, *ends, *ids, *kids;
    if (!level) return NULL;
    if (level_lists(level, &starts, &ends, &ids, &kids) < 0) { Py_DECREF(level); return NULL; }
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data) / PACKED_SIZE;
    for (Py_ssize_t k = 0; k < n; k++, p += PACKED_SIZE) {
        PyObject *start = PyLong_FromLongLong((long long)get_le64(p));
        PyObject *end = start ? PyLong_FromLongLong((long long)get_le64(p + 8)) : NULL;
        PyObject *id = end ? PyLong_FromUnsignedLongLong(get_le64(p + 16)) : NULL;
        int r = id && PyList_Append(starts, start) == 0 && PyList_Append(ends, end) == 0
                && PyList_Append(ids, id) == 0 && PyList_Append(kids, Py_None) == 0;
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(id);
        if (!r) { Py_DECREF(level); return NULL; }
    }
    return level;
}

/* Lane.pack_last for the lane `lane_ref` (group, index) names: the children of its root's last
 * interval packed (lanes.pack_leaves) where that interval is `span_id`'s and they are all leaves
 * that fit. 0 done or not the case; -1 an error. */
static int pack_last(PyObject *lane_ref, PyObject *span_id) {
    if (!PyTuple_CheckExact(lane_ref) || PyTuple_GET_SIZE(lane_ref) != 2) return 0;
    PyObject *group = PyTuple_GET_ITEM(lane_ref, 0), *lanes;
    if (Py_TYPE(group) != t_group || !(lanes = SLOT(group, o_group_lanes)) || !PyList_CheckExact(lanes)) return 0;
    Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(lane_ref, 1));
    if (index == -1 && PyErr_Occurred()) return -1;
    if (index < 0 || index >= PyList_GET_SIZE(lanes)) return 0;
    PyObject *lane = PyList_GET_ITEM(lanes, index), *root, *starts, *ends, *ids, *kids;
    if (Py_TYPE(lane) != t_lane || !(root = SLOT(lane, o_lane_root)) || level_lists(root, &starts, &ends, &ids, &kids) < 0)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    if (!n || PyList_GET_SIZE(kids) != n) return 0;
    int same = same_value(PyList_GET_ITEM(ids, n - 1), span_id);
    if (same <= 0) return same;
    PyObject *kid = PyList_GET_ITEM(kids, n - 1), *k_starts, *k_ends, *k_ids, *k_kids;
    if (Py_TYPE(kid) != t_level) return 0;  /* no children, or packed already */
    if (level_lists(kid, &k_starts, &k_ends, &k_ids, &k_kids) < 0) return -1;
    Py_ssize_t m = PyList_GET_SIZE(k_starts);
    if (PyList_GET_SIZE(k_ends) != m || PyList_GET_SIZE(k_ids) != m || PyList_GET_SIZE(k_kids) != m) return 0;
    PyObject *packed = PyBytes_FromStringAndSize(NULL, m * PACKED_SIZE);
    if (!packed) return -1;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(packed);
    for (Py_ssize_t k = 0; k < m; k++, p += PACKED_SIZE) {
        long long start, end;
        PyObject *id = PyList_GET_ITEM(k_ids, k);
        unsigned long long id_value = PyLong_CheckExact(id) ? PyLong_AsUnsignedLongLong(id) : (unsigned long long)-1;
        if (PyList_GET_ITEM(k_kids, k) != Py_None || !as_int64(PyList_GET_ITEM(k_starts, k), &start)
            || !as_int64(PyList_GET_ITEM(k_ends, k), &end) || !PyLong_CheckExact(id)
            || (id_value == (unsigned long long)-1 && PyErr_Occurred())) {
            PyErr_Clear();  /* not all leaves that fit: kept as it is */
            Py_DECREF(packed);
            return 0;
        }
        put_le64(p, (unsigned long long)start);
        put_le64(p + 8, (unsigned long long)end);
        put_le64(p + 16, id_value);
    }
    return PyList_SetItem(kids, n - 1, packed);  /* steals it; the level goes */
}

/* Lane.insert: 1 inserted, 0 refused (the lane unchanged), -1 an error. */
static int lane_insert(PyObject *lane, PyObject *start_o, long long start, PyObject *end_o, long long end,
                       PyObject *span_id, PyObject *parent_of, PyObject *own_parent) {
    PyObject *own = own_parent ? span_id : NULL;  /* a bundled phase's parent, which parent_of does not hold */
    if (Py_TYPE(lane) != t_lane) { PyErr_SetString(PyExc_TypeError, "not a Lane"); return -1; }
    PyObject *pruned = SLOT(lane, o_lane_pruned);
    if (!pruned) { PyErr_SetString(PyExc_TypeError, "a lane without pruned_before"); return -1; }
    if (PyFloat_CheckExact(pruned)) {  /* -inf until the lane first prunes: any start comes in */
        int lt = isinf(PyFloat_AS_DOUBLE(pruned)) && PyFloat_AS_DOUBLE(pruned) < 0
                 ? 0 : PyObject_RichCompareBool(start_o, pruned, Py_LT);
        if (lt) return lt < 0 ? -1 : 0;
    } else {
        long long before;
        if (!as_int64(pruned, &before)) { PyErr_SetString(PyExc_TypeError, "pruned_before must be int64"); return -1; }
        if (start < before) return 0;
    }
    PyObject *level = SLOT(lane, o_lane_root), *starts, *ends, *ids, *kids;
    if (!level || level_lists(level, &starts, &ends, &ids, &kids) < 0) return -1;
    Py_ssize_t n = PyList_GET_SIZE(ends);
    long long last = 0;
    if (n && ll_at(ends, n - 1, &last) < 0) return -1;
    if (!n || last <= start) {
        if (PyList_Append(starts, start_o) < 0 || PyList_Append(ends, end_o) < 0 || PyList_Append(ids, span_id) < 0
            || PyList_Append(kids, Py_None) < 0)
            return -1;
        goto inserted;
    }
    for (;;) {
        Py_ssize_t i, j;
        if (bisect_ll(ends, start, 0, 1, &i) < 0 || bisect_ll(starts, end, i, 0, &j) < 0) return -1;
        if (i == j) {
            if (PyList_Insert(starts, i, start_o) < 0 || PyList_Insert(ends, i, end_o) < 0
                || PyList_Insert(ids, i, span_id) < 0 || PyList_Insert(kids, i, Py_None) < 0)
                return -1;
            break;
        }
        long long first_start, first_end, last_end;
        if (ll_at(starts, i, &first_start) < 0 || ll_at(ends, i, &first_end) < 0 || ll_at(ends, j - 1, &last_end) < 0)
            return -1;
        if (j - i == 1 && first_start <= start && first_end >= end) {
            int a = is_ancestor(parent_of, PyList_GET_ITEM(ids, i), span_id, own, own_parent);
            if (a < 0) return -1;
            if (a) {
                PyObject *kid = PyList_GET_ITEM(kids, i);
                if (kid == Py_None || PyBytes_CheckExact(kid)) {
                    kid = kid == Py_None ? new_level() : unpack_leaves(kid);
                    if (!kid) return -1;
                    PyList_SetItem(kids, i, kid);  /* steals it; the list keeps it alive below */
                }
                level = kid;
                if (level_lists(level, &starts, &ends, &ids, &kids) < 0) return -1;
                continue;
            }
        }
        /* Otherwise the new span must enclose everything it touches, all its own descendants. */
        if (first_start < start || last_end > end) return 0;
        for (Py_ssize_t k = i; k < j; k++) {
            int a = is_ancestor(parent_of, span_id, PyList_GET_ITEM(ids, k), own, own_parent);
            if (a <= 0) return a;
        }
        /* A level of the intervals it adopts, its lists those slices (no empty ones made first). */
        PyObject *adopted = t_level->tp_alloc(t_level, 0);
        if (!adopted) return -1;
        PyObject *lists[4] = {starts, ends, ids, kids}, *values[4] = {start_o, end_o, span_id, adopted};
        Py_ssize_t offs[4] = {o_level_starts, o_level_ends, o_level_ids, o_level_kids};
        for (int k = 0; k < 4; k++) {
            PyObject *part = PyList_GetSlice(lists[k], i, j);
            if (!part) { Py_DECREF(adopted); return -1; }
            SLOT(adopted, offs[k]) = part;
        }
        int r = 0;
        for (int k = 0; k < 4 && r == 0; k++)  /* one interval adopted (a task its session): set in place */
            r = j - i == 1 ? PyList_SetItem(lists[k], i, Py_NewRef(values[k])) : replace_slice(lists[k], i, j, values[k]);
        Py_DECREF(adopted);
        if (r) return -1;
        break;
    }
inserted:;
    long long count, max_end;
    if (!as_int64(SLOT(lane, o_lane_count), &count) || !as_int64(SLOT(lane, o_lane_max_end), &max_end)) {
        PyErr_SetString(PyExc_TypeError, "a lane's counts must be ints");
        return -1;
    }
    PyObject *num = PyLong_FromLongLong(count + 1);
    if (!num) return -1;
    set_slot(lane, o_lane_count, num);
    if (end > max_end) set_slot(lane, o_lane_max_end, Py_NewRef(end_o));
    return 1;
}

/* Whether Lane.insert surely refuses [start, end] (end >= start) at the lane's root level, where
 * its last root interval [a, b] (a < start < b) is the only one the span touches (the root
 * intervals before it end by a):
 * - it ends inside the span (b < end): it neither holds the span nor lies within it;
 * - it holds the span (end <= b) but is not its ancestor: Lane.insert would step into it only
 *   for a descendant, and cannot make the span hold it (a < start).
 * 1: refused; 0: Lane.insert decides; -1 an error. A thread with many sessions open at once has
 * a lane each, and a session tries them in turn: the sessions of a task end together, so each
 * lies within the one before it on the lane before its own. */
static int surely_refused(PyObject *lane, long long start, long long end, PyObject *span_id, PyObject *parent_of,
                          PyObject *own_parent) {
    PyObject *level = Py_TYPE(lane) == t_lane ? SLOT(lane, o_lane_root) : NULL, *starts, *ends, *ids;
    if (!level || Py_TYPE(level) != t_level || !(starts = SLOT(level, o_level_starts))
        || !(ends = SLOT(level, o_level_ends)) || !(ids = SLOT(level, o_level_ids)) || !PyList_CheckExact(starts)
        || !PyList_CheckExact(ends) || !PyList_CheckExact(ids))
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(ends);
    long long a, b;
    if (!n || PyList_GET_SIZE(starts) != n || PyList_GET_SIZE(ids) != n || !as_int64(PyList_GET_ITEM(starts, n - 1), &a)
        || !as_int64(PyList_GET_ITEM(ends, n - 1), &b) || !(a < start && start < b))
        return 0;
    if (b < end) return 1;
    int ancestor = is_ancestor(parent_of, PyList_GET_ITEM(ids, n - 1), span_id, own_parent ? span_id : NULL, own_parent);
    return ancestor < 0 ? -1 : !ancestor;
}

static int add_clock(PyObject *enc, PyObject *group) {
    Batch *b = live(enc);
    if (b) {
        PyObject *num = PyLong_FromLongLong(++b->clock);
        b->dirty = 1;
        if (!num) return -1;
        set_slot(group, o_group_used, num);
        return 0;
    }
    PyObject *clock = attr(enc, a_clock);
    if (!clock) return -1;
    PyObject *next = PyNumber_Add(clock, one);
    Py_DECREF(clock);
    if (!next) return -1;
    int r = PyObject_SetAttr(enc, a_clock, next);
    if (r == 0) set_slot(group, o_group_used, next);
    else Py_DECREF(next);
    return r;
}

/* dict.pop(key, None): a new reference or NULL (absent, or an error: check PyErr_Occurred). */
static PyObject *dict_pop(PyObject *dict, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(dict, key);
    if (!v) return NULL;
    Py_INCREF(v);
    if (PyDict_DelItem(dict, key) < 0) { Py_DECREF(v); return NULL; }
    return v;
}

static int in_tried(Py_ssize_t *tried, int n, Py_ssize_t index) {
    for (int k = 0; k < n; k++) if (tried[k] == index) return 1;
    return 0;
}

static Py_ssize_t lane_index(PyObject *lane) {
    PyObject *index = SLOT(lane, o_lane_index);
    return index ? PyLong_AsSsize_t(index) : -1;
}

/* enc.name(*args): a call into the encoder's Python, with the live state handed over. */
static PyObject *call_encoder(PyObject *enc, PyObject *name, PyObject **args, size_t n) {
    Handover h;
    if (hand_out(enc, &h) < 0) return NULL;
    PyObject *r = PyObject_VectorcallMethod(name, args, n | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (take_back(&h) < 0) Py_CLEAR(r);
    return r;
}

static int call_out(PyObject *enc, PyObject *name, PyObject **args, size_t n) {  /* enc.name(*args) */
    PyObject *r = call_encoder(enc, name, args, n);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* The flow arrow from a parent's placement to its child's: its lines written by flows_fn,
 * or the encoder's _link where that leaves them. */
static int flow_link(PyObject *enc, PyObject *parent, PyObject *child, PyObject *child_id, PyObject *out) {
    PyObject *argv[4] = {child_id, parent, child, out};
    PyObject *done = PyObject_Vectorcall(flows_fn, argv, 4, NULL);
    if (!done) return -1;
    int written = done == Py_True;
    Py_DECREF(done);
    if (written) return 0;
    PyObject *call[5] = {enc, parent, child, child_id, out};
    return call_out(enc, s_link, call, 5);
}

/* Lane.shorten once a lane's count reaches its next prune, as _place does after an insert. */
static int shorten_when_due(PyObject *enc, PyObject *lane) {
    long long count, next_prune;
    if (!as_int64(SLOT(lane, o_lane_count), &count) || !as_int64(SLOT(lane, o_lane_next), &next_prune)) {
        PyErr_SetString(PyExc_TypeError, "a lane's counts must be ints");
        return -1;
    }
    if (count < next_prune) return 0;
    PyObject *h = attr(enc, a_horizon), *m = attr(enc, a_max_intervals), *p = attr(enc, a_prune_step), *got = NULL;
    if (h && m && p) got = PyObject_CallMethodObjArgs(lane, s_shorten, h, m, p, NULL);
    Py_XDECREF(h);
    Py_XDECREF(m);
    Py_XDECREF(p);
    if (!got) return -1;
    Py_DECREF(got);
    return 0;
}

/* The trace's text for a span's line (a new reference: None on a root, whose span id is its
 * trace id); the latest trace id and its text are shared with the walk over batches. */
static PyObject *span_trace_hex(PyObject *enc, PyObject *trace_id, PyObject *span_id) {
    int root = same_value(trace_id, span_id);
    if (root < 0) return NULL;
    if (root) return Py_NewRef(Py_None);
    Batch *live_b = live(enc);
    if (live_b) {  /* the walk's latest trace id and text */
        int same = same_value(live_b->trace_id, trace_id);
        if (same < 0) return NULL;
        if (!same) {
            PyObject *fresh = trace_text(trace_id, hex_spec);
            if (!fresh) return NULL;
            Py_SETREF(live_b->trace_id, Py_NewRef(trace_id));
            Py_SETREF(live_b->trace_hex, fresh);
            live_b->dirty = 1;
        }
        return Py_NewRef(live_b->trace_hex);
    }
    PyObject *cached = attr(enc, a_trace_hex), *trace_hex = NULL;
    if (!cached) return NULL;
    int same = PyTuple_CheckExact(cached) && PyTuple_GET_SIZE(cached) == 2
               ? PyObject_RichCompareBool(PyTuple_GET_ITEM(cached, 0), trace_id, Py_NE) : -2;
    if (same == 0) {
        trace_hex = Py_NewRef(PyTuple_GET_ITEM(cached, 1));
    } else if (same == 1 || same == -2) {
        if (same == -2) PyErr_Clear();
        trace_hex = trace_text(trace_id, hex_spec);
        PyObject *pair = trace_hex ? PyTuple_Pack(2, trace_id, trace_hex) : NULL;
        if (!pair || PyObject_SetAttr(enc, a_trace_hex, pair) < 0) Py_CLEAR(trace_hex);
        Py_XDECREF(pair);
    }
    Py_DECREF(cached);
    return trace_hex;
}

/* A placed span's slice: its line from the line writer, or the encoder's _slice where the
 * writer leaves it to the dict; then its gauge sample and events (_extras). */
static int write_slice(PyObject *enc, PyObject *rec, PyObject *attrs, PyObject *span_kind, PyObject *cat,
                       PyObject *trace_hex, PyObject *pid, PyObject *tid, PyObject *ts, long long duration,
                       PyObject *end_o, PyObject *out) {
    PyObject *writer = attr(enc, a_complete_line), *line = NULL;
    if (!writer) return -1;
    if (writer != Py_None && !is_text(span_kind, kind_instant))
        line = complete_line(writer, rec, attrs, cat, ts, duration, pid, tid, trace_hex);
    Py_DECREF(writer);
    if (PyErr_Occurred()) { Py_XDECREF(line); return -1; }
    int r;
    if (line && line != Py_None) {
        r = PyList_Append(out, line);
    } else {
        PyObject *call[11] = {enc, rec, attrs, span_kind ? span_kind : Py_None, cat, trace_hex, pid, tid, ts, end_o,
                              out};
        r = call_out(enc, s_slice, call, 11);
    }
    Py_XDECREF(line);
    if (r < 0) return -1;
    PyObject *events = PyTuple_GET_ITEM(rec, i_events);
    int has_events = events != Py_None && PyObject_IsTrue(events);
    int gauge = PyDict_Contains(attrs, k_gauge);
    if (has_events < 0 || gauge < 0) return -1;
    if (gauge || has_events) {
        PyObject *call[8] = {enc, rec, attrs, cat, pid, tid, ts, out};
        return call_out(enc, s_extras, call, 8);
    }
    return 0;
}

static PyObject *place_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "place_span(encoder, rec, proc, attrs, out, prefer)");
        return NULL;
    }
    PyObject *enc = args[0], *rec = args[1], *proc = args[2], *attrs = args[3], *out = args[4], *prefer = args[5];
    if (!complete_fn || !PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || Py_TYPE(proc) != t_proc
        || !PyList_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "place_span: a record, a ProcessLanes and a list");
        return NULL;
    }
    PyObject *result = NULL, *placed = NULL, *parent_of = NULL, *waiting = NULL, *children = NULL, *group = NULL;
    PyObject *chosen = NULL, *ts = NULL, *record = NULL, *trace_hex = NULL;
    PyObject *start_o = PyTuple_GET_ITEM(rec, i_start), *end_o = PyTuple_GET_ITEM(rec, i_end);
    PyObject *span_id = PyTuple_GET_ITEM(rec, i_span), *parent_id = PyTuple_GET_ITEM(rec, i_parent);
    long long start, end;
    if (!as_int64(start_o, &start) || !as_int64(end_o, &end)) {
        PyErr_SetString(PyExc_TypeError, "span times must be int64");
        return NULL;
    }
    if (end < start) { end = start; end_o = start_o; }
    int remote = PyObject_IsTrue(PyTuple_GET_ITEM(rec, i_remote));
    int has_parent = PyObject_IsTrue(parent_id);
    if (remote < 0 || has_parent < 0) return NULL;
    /* A bundled phase is no one's parent: no child waits for it and no map keeps it. */
    PyObject *own_parent = has_parent && !remote && bundled_phase(rec) ? parent_id : NULL;
    if (!(placed = attr(enc, a_placed)) || !(parent_of = attr(enc, a_parent_of)) || !(waiting = attr(enc, a_waiting)))
        goto done;
    if (Py_TYPE(placed) != t_map || Py_TYPE(parent_of) != t_map || Py_TYPE(waiting) != t_map) {
        PyErr_SetString(PyExc_TypeError, "the encoder's maps must be TwoGenerationMaps");
        goto done;
    }

    PyObject *thread = PyDict_GetItemWithError(attrs, k_thread_id);
    if (!thread && PyErr_Occurred()) goto done;
    PyObject *groups = SLOT(proc, o_proc_groups);
    if (thread && thread != Py_None && groups && PyDict_CheckExact(groups)) {
        group = Py_XNewRef(PyDict_GetItemWithError(groups, thread));
        if (!group && PyErr_Occurred()) goto done;
    }
    if (group) {
        if (add_clock(enc, group) < 0) goto done;
    } else {
        PyObject *call[4] = {enc, proc, attrs, rec};
        group = call_encoder(enc, s_group, call, 4);
        if (!group) goto done;
    }
    if (Py_TYPE(group) != t_group) { PyErr_SetString(PyExc_TypeError, "not a LaneGroup"); goto done; }
    PyObject *lanes = SLOT(group, o_group_lanes);
    if (!lanes || !PyList_CheckExact(lanes)) { PyErr_SetString(PyExc_TypeError, "lanes must be a list"); goto done; }

    PyObject *parent_rec = NULL;
    if (has_parent && !remote) {
        parent_rec = map_get(placed, parent_id);
        if (!parent_rec && PyErr_Occurred()) goto done;
        if (parent_rec && (!PyTuple_CheckExact(parent_rec) || PyTuple_GET_SIZE(parent_rec) < 5)) {
            PyErr_SetString(PyExc_TypeError, "a placed span's entry must be a 5-tuple");
            goto done;
        }
        Py_XINCREF(parent_rec);
    }
    if (!own_parent && !map_empty(waiting)) {  /* TwoGenerationMap.pop */
        PyObject *young = SLOT(waiting, o_map_young), *old = SLOT(waiting, o_map_old);
        PyObject *a = dict_pop(young, span_id);
        PyObject *b = PyErr_Occurred() ? NULL : dict_pop(old, span_id);
        if (PyErr_Occurred()) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            Py_XDECREF(parent_rec);
            goto done;
        }
        if (a && a != Py_None) { children = a; Py_XDECREF(b); }
        else { Py_XDECREF(a); children = b && b != Py_None ? b : (Py_XDECREF(b), NULL); }
    }
    int has_children = children && PyObject_IsTrue(children) > 0;
    if (children && !PyList_CheckExact(children)) {
        Py_XDECREF(parent_rec);
        PyErr_SetString(PyExc_TypeError, "waiting children must be a list");
        goto done;
    }

    Py_ssize_t n_lanes = PyList_GET_SIZE(lanes);
    int r;
    if (!parent_rec && prefer == Py_None && !has_children) {
        for (Py_ssize_t k = 0; k < n_lanes && !chosen; k++) {
            PyObject *lane = PyList_GET_ITEM(lanes, k);
            int refused = surely_refused(lane, start, end, span_id, parent_of, own_parent);
            if (refused < 0) { Py_XDECREF(parent_rec); goto done; }
            if (refused) continue;
            r = lane_insert(lane, start_o, start, end_o, end, span_id, parent_of, own_parent);
            if (r < 0) { Py_XDECREF(parent_rec); goto done; }
            if (r) chosen = Py_NewRef(lane);
        }
    } else {
        Py_ssize_t tried[3];
        int n_tried = 0;
        if (parent_rec && PyTuple_GET_ITEM(parent_rec, 0) == group)
            tried[n_tried++] = PyLong_AsSsize_t(PyTuple_GET_ITEM(parent_rec, 1));
        if (prefer != Py_None && PyTuple_Check(prefer) && PyTuple_GET_SIZE(prefer) == 2
            && PyTuple_GET_ITEM(prefer, 0) == group) {
            Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(prefer, 1));
            if (!in_tried(tried, n_tried, index)) tried[n_tried++] = index;
        }
        if (has_children) {
            for (Py_ssize_t k = 0; k < PyList_GET_SIZE(children); k++) {
                PyObject *child = PyList_GET_ITEM(children, k);
                if (PyTuple_Check(child) && PyTuple_GET_SIZE(child) >= 6 && PyTuple_GET_ITEM(child, 0) == group) {
                    Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(child, 1));
                    if (!in_tried(tried, n_tried, index)) {
                        tried[n_tried++] = index;
                        break;
                    }
                }
            }
        }
        if (PyErr_Occurred()) { Py_XDECREF(parent_rec); goto done; }
        for (int k = 0; k < n_tried && !chosen; k++) {
            if (tried[k] < 0 || tried[k] >= n_lanes) {  /* lanes[index] raises IndexError */
                PyErr_SetString(PyExc_IndexError, "list index out of range");
                Py_XDECREF(parent_rec);
                goto done;
            }
            PyObject *lane = PyList_GET_ITEM(lanes, tried[k]);
            r = lane_insert(lane, start_o, start, end_o, end, span_id, parent_of, own_parent);
            if (r < 0) { Py_XDECREF(parent_rec); goto done; }
            if (r) chosen = Py_NewRef(lane);
        }
        for (Py_ssize_t k = 0; k < n_lanes && !chosen; k++) {
            PyObject *lane = PyList_GET_ITEM(lanes, k);
            if (in_tried(tried, n_tried, lane_index(lane))) continue;
            int refused = surely_refused(lane, start, end, span_id, parent_of, own_parent);
            if (refused < 0) { Py_XDECREF(parent_rec); goto done; }
            if (refused) continue;
            r = lane_insert(lane, start_o, start, end_o, end, span_id, parent_of, own_parent);
            if (r < 0) { Py_XDECREF(parent_rec); goto done; }
            if (r) chosen = Py_NewRef(lane);
        }
    }
    if (!chosen) {
        PyObject *call[4] = {enc, proc, group, out};
        chosen = call_encoder(enc, s_new_lane, call, 4);
        if (!chosen || lane_insert(chosen, start_o, start, end_o, end, span_id, parent_of, own_parent) < 0) {
            Py_XDECREF(parent_rec);
            goto done;
        }
    }
    if (shorten_when_due(enc, chosen) < 0) { Py_XDECREF(parent_rec); goto done; }

    PyObject *pid = SLOT(proc, o_proc_pid), *tid = SLOT(chosen, o_lane_tid);
    PyObject *index = SLOT(chosen, o_lane_index);
    if (!pid || !tid || !index) {
        PyErr_SetString(PyExc_TypeError, "a lane or process without its fields");
        Py_XDECREF(parent_rec);
        goto done;
    }
    if (!(ts = micros(start))) { Py_XDECREF(parent_rec); goto done; }
    PyObject *span_kind = PyDict_GetItemWithError(attrs, k_span_kind);
    PyObject *cat = span_kind || !PyErr_Occurred() ? category(attrs, span_kind) : NULL;
    if (!cat) { Py_XDECREF(parent_rec); goto done; }
    if (!(trace_hex = span_trace_hex(enc, PyTuple_GET_ITEM(rec, i_trace), span_id))
        || write_slice(enc, rec, attrs, span_kind, cat, trace_hex, pid, tid, ts, end - start, end_o, out) < 0) {
        Py_XDECREF(parent_rec);
        goto done;
    }

    if (!(record = PyTuple_Pack(5, group, index, pid, tid, ts)) || (!own_parent && map_set(placed, span_id, record) < 0)) {
        Py_XDECREF(parent_rec);
        goto done;
    }
    if (has_parent) {
        if (remote) {
            PyObject *call[7] = {enc, span_id, parent_id, pid, tid, ts, out};
            r = call_out(enc, s_remote_flow, call, 7);
        } else if (parent_rec) {
            int same_pid = same_value(PyTuple_GET_ITEM(parent_rec, 2), pid);
            int same_tid = same_pid > 0 ? same_value(PyTuple_GET_ITEM(parent_rec, 3), tid) : 0;
            r = same_pid < 0 || same_tid < 0 ? -1 : 0;
            if (r == 0 && !(same_pid && same_tid)) {
                r = flow_link(enc, parent_rec, record, span_id, out);
            }
        } else {
            PyObject *siblings = map_get(waiting, parent_id);
            PyObject *entry = NULL;
            r = siblings || !PyErr_Occurred() ? 0 : -1;
            if (r == 0 && siblings && PyList_CheckExact(siblings) && PyList_GET_SIZE(siblings) >= max_waiting) {
                PyObject *call[1] = {enc};
                r = call_out(enc, s_flows_dropped, call, 1);
            } else if (r == 0) {
                entry = PyTuple_Pack(6, group, index, pid, tid, ts, span_id);
                if (!entry) r = -1;
                else if (siblings) r = PyList_Append(siblings, entry);
                else {
                    PyObject *list = PyList_New(1);
                    if (!list) r = -1;
                    else {
                        PyList_SET_ITEM(list, 0, Py_NewRef(entry));
                        r = map_set(waiting, parent_id, list);
                        Py_DECREF(list);
                    }
                }
                Py_XDECREF(entry);
            }
        }
        if (r < 0) { Py_XDECREF(parent_rec); goto done; }
    }
    Py_XDECREF(parent_rec);
    if (has_children) {
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(children); k++) {
            PyObject *child = PyList_GET_ITEM(children, k);
            if (!PyTuple_Check(child) || PyTuple_GET_SIZE(child) < 6) {
                PyErr_SetString(PyExc_TypeError, "a waiting child must be a 6-tuple");
                goto done;
            }
            int same_pid = same_value(PyTuple_GET_ITEM(child, 2), pid);
            int same_tid = same_pid > 0 ? same_value(PyTuple_GET_ITEM(child, 3), tid) : 0;
            if (same_pid < 0 || same_tid < 0) goto done;
            if (same_pid && same_tid) continue;  /* same track: nesting already shows it */
            if (flow_link(enc, record, child, PyTuple_GET_ITEM(child, 5), out) < 0) goto done;
        }
    }
    long long kind;
    if (!as_int64(PyTuple_GET_ITEM(rec, i_kind), &kind)) kind = -1;
    int sent = 0;
    if (kind != client_kind && kind != producer_kind) {
        PyObject *flag = PyDict_GetItemWithError(attrs, k_context_sent);
        if (!flag && PyErr_Occurred()) goto done;
        sent = flag ? PyObject_IsTrue(flag) : 0;
        if (sent < 0) goto done;
    }
    if (kind == client_kind || kind == producer_kind || sent) {
        PyObject *call[6] = {enc, span_id, pid, tid, ts, out};
        if (call_out(enc, s_flow_source, call, 6) < 0) goto done;
    }
    result = PyTuple_Pack(2, group, index);
done:
    Py_XDECREF(placed);
    Py_XDECREF(parent_of);
    Py_XDECREF(waiting);
    Py_XDECREF(children);
    Py_XDECREF(group);
    Py_XDECREF(chosen);
    Py_XDECREF(ts);
    Py_XDECREF(record);
    Py_XDECREF(trace_hex);
    return result;
}

/* --- any span, sessions included: ChromeTraceEncoder._add -------------------------------------
 * add_span(encoder, rec, attrs, proc, out): what _add does. A session's spans wait, in the
 * encoder's _buffered dict, for their session span, and are laid out under it when it comes
 * (sorted outer first, as the encoder's own key function sorts them); the spans of a session whose span
 * lives in another process are placed at once. A sampled counter's event is the encoder's
 * Python (_counter_line), as is the count of sessions released early. */
static PyObject *a_buffered_count;
static PyObject *s_counter_line, *s_released_early, *s_sort, *outer_first, *sort_kwnames;

static PyObject *place_one(PyObject *enc, PyObject *rec, PyObject *proc, PyObject *attrs, PyObject *out,
                           PyObject *prefer) {
    PyObject *argv[6] = {enc, rec, proc, attrs, out, prefer};
    return place_span(NULL, argv, 6);
}

static int add_count(PyObject *enc, Py_ssize_t delta) {  /* enc._buffered_count += delta */
    PyObject *count = attr(enc, a_buffered_count);
    if (!count) return -1;
    PyObject *d = PyLong_FromSsize_t(delta), *next = d ? PyNumber_Add(count, d) : NULL;
    Py_DECREF(count);
    Py_XDECREF(d);
    if (!next) return -1;
    int r = PyObject_SetAttr(enc, a_buffered_count, next);
    Py_DECREF(next);
    return r;
}

/* waiting.sort(key=outer_first) without a call per item, where every key is a pair of int64s
 * and the list is short (a session's phases): 1 sorted, 0 left to the list's own sort. Insertion
 * sort is stable, as list.sort is, so equal keys keep their order. */
#define SORT_IN_C_MAX 32
static int sort_outer_first(PyObject *waiting) {
    Py_ssize_t n = PyList_GET_SIZE(waiting);
    if (n > SORT_IN_C_MAX) return 0;
    long long start[SORT_IN_C_MAX], neg_end[SORT_IN_C_MAX];
    PyObject *item[SORT_IN_C_MAX];
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *it = PyList_GET_ITEM(waiting, k), *rec;
        long long end;
        if (!PyTuple_CheckExact(it) || PyTuple_GET_SIZE(it) != 3 || !PyTuple_CheckExact(rec = PyTuple_GET_ITEM(it, 0))
            || PyTuple_GET_SIZE(rec) != n_fields || !as_int64(PyTuple_GET_ITEM(rec, i_start), &start[k])
            || !as_int64(PyTuple_GET_ITEM(rec, i_end), &end) || end == LLONG_MIN)
            return 0;
        neg_end[k] = -end;
        item[k] = it;
    }
    for (Py_ssize_t k = 1; k < n; k++) {
        long long s = start[k], e = neg_end[k];
        PyObject *it = item[k];
        Py_ssize_t j = k;
        for (; j > 0 && (start[j - 1] > s || (start[j - 1] == s && neg_end[j - 1] > e)); j--) {
            start[j] = start[j - 1];
            neg_end[j] = neg_end[j - 1];
            item[j] = item[j - 1];
        }
        start[j] = s;
        neg_end[j] = e;
        item[j] = it;
    }
    /* The list holds the same references, reordered: no counts change. */
    for (Py_ssize_t k = 0; k < n; k++) PyList_SET_ITEM(waiting, k, item[k]);
    return 1;
}

/* A bundled phase of the session span `session` that lane `prefer` just took: what place_span
 * does for it where the lane takes it too (its thread's group is the session's). The parent's
 * entry is that lane; there is no child to wait for, no flow between the two (one track), no
 * map entry (see bundled_phase) and no pair to return. What is the same for every phase of the
 * session (the lane, its group and process, the session's entry) is found once (bundle_open);
 * place_in then takes each phase: 1 placed; 0 not this case, nothing changed (place_span's
 * way); -1 an error. */
typedef struct {
    PyObject *enc, *proc, *out, *session, *group, *groups, *lane, *parent_of, *pid, *tid;
    int usable;  /* 0: every phase takes place_span's way */
} BundleLane;

static void bundle_close(BundleLane *c) {
    Py_CLEAR(c->parent_of);
}

/* 0, or -1 on error; c->usable says whether place_in may take the phases. */
static int bundle_open(BundleLane *c, PyObject *enc, PyObject *proc, PyObject *out, PyObject *prefer,
                       PyObject *session) {
    memset(c, 0, sizeof(*c));
    c->enc = enc;
    c->proc = proc;
    c->out = out;
    c->session = session;
    if (!session || !PyTuple_CheckExact(prefer) || PyTuple_GET_SIZE(prefer) != 2 || Py_TYPE(proc) != t_proc) return 0;
    PyObject *group = PyTuple_GET_ITEM(prefer, 0), *groups = SLOT(proc, o_proc_groups);
    if (!groups || !PyDict_CheckExact(groups) || Py_TYPE(group) != t_group) return 0;
    PyObject *lanes = SLOT(group, o_group_lanes);
    Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(prefer, 1));
    if (index == -1 && PyErr_Occurred()) return -1;
    if (!lanes || !PyList_CheckExact(lanes) || index < 0 || index >= PyList_GET_SIZE(lanes)) return 0;
    PyObject *placed = attr(enc, a_placed);
    if (!placed) return -1;
    int r = 0;
    if (!(c->parent_of = attr(enc, a_parent_of))) r = -1;
    else if (Py_TYPE(placed) == t_map && Py_TYPE(c->parent_of) == t_map) {
        /* the session's entry: its lane is the one preferred */
        PyObject *parent_rec = map_get(placed, session);
        if (!parent_rec) r = PyErr_Occurred() ? -1 : 0;
        else if (PyTuple_CheckExact(parent_rec) && PyTuple_GET_SIZE(parent_rec) >= 5
                 && PyTuple_GET_ITEM(parent_rec, 0) == group) {
            int same = same_value(PyTuple_GET_ITEM(parent_rec, 1), PyTuple_GET_ITEM(prefer, 1));
            if (same < 0) r = -1;
            c->usable = same > 0;
        }
    }
    Py_DECREF(placed);
    if (r < 0) return -1;
    if (c->usable) {
        c->group = group;
        c->groups = groups;
        c->lane = PyList_GET_ITEM(lanes, index);
        c->pid = SLOT(proc, o_proc_pid);
        c->tid = SLOT(c->lane, o_lane_tid);
        if (!c->pid || !c->tid) {
            PyErr_SetString(PyExc_TypeError, "a lane or process without its fields");
            return -1;
        }
    }
    return 0;
}

/* Whether a phase may go onto c's lane as place_in takes it (a bundled phase of c's session,
 * on its session's thread, not a client or producer span): 1, with its times (an end before
 * its start taken as the start, end_o the object of the end taken); 0 not; -1 an error. */
static int phase_on_lane(BundleLane *c, PyObject *rec, PyObject *attrs, long long *start, long long *end,
                         PyObject **end_o) {
    long long kind;
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || !PyDict_CheckExact(attrs)
        || PyTuple_GET_ITEM(rec, i_remote) != Py_False || !bundled_phase(rec)
        || !as_int64(PyTuple_GET_ITEM(rec, i_start), start) || !as_int64(PyTuple_GET_ITEM(rec, i_end), end)
        || !as_int64(PyTuple_GET_ITEM(rec, i_kind), &kind) || kind == client_kind || kind == producer_kind)
        return 0;
    *end_o = PyTuple_GET_ITEM(rec, i_end);
    if (*end < *start) {
        *end = *start;
        *end_o = PyTuple_GET_ITEM(rec, i_start);
    }
    int is_child = same_value(PyTuple_GET_ITEM(rec, i_parent), c->session);
    if (is_child <= 0) return is_child;
    PyObject *thread = PyDict_GetItemWithError(attrs, k_thread_id);
    if (!thread || thread == Py_None || PyDict_GetItemWithError(c->groups, thread) != c->group
        || PyDict_GetItemWithError(attrs, k_context_sent))
        return PyErr_Occurred() ? -1 : 0;
    return 1;
}

/* A phase just placed on c's lane: the clock moved on and its line written, the rest of what
 * place_span does after its insert (but the lane's shortening). 0, or -1 on error. */
static int phase_slice(BundleLane *c, PyObject *rec, PyObject *attrs, long long start, long long end,
                       PyObject *end_o) {
    PyObject *ts = NULL, *trace_hex = NULL;
    if (add_clock(c->enc, c->group) < 0) return -1;
    PyObject *span_kind = PyDict_GetItemWithError(attrs, k_span_kind);
    PyObject *cat = span_kind || !PyErr_Occurred() ? category(attrs, span_kind) : NULL;
    int r = cat && (ts = micros(start))
            && (trace_hex = span_trace_hex(c->enc, PyTuple_GET_ITEM(rec, i_trace), PyTuple_GET_ITEM(rec, i_span)))
            ? write_slice(c->enc, rec, attrs, span_kind, cat, trace_hex, c->pid, c->tid, ts, end - start, end_o, c->out)
            : -1;
    Py_XDECREF(ts);
    Py_XDECREF(trace_hex);
    return r < 0 ? -1 : 0;
}

static int place_in(BundleLane *c, PyObject *rec, PyObject *attrs) {
    long long start, end;
    PyObject *end_o;
    int fits = c->usable ? phase_on_lane(c, rec, attrs, &start, &end, &end_o) : 0;
    if (fits <= 0) return fits;
    int inserted = lane_insert(c->lane, PyTuple_GET_ITEM(rec, i_start), start, end_o, end, PyTuple_GET_ITEM(rec, i_span),
                               c->parent_of, PyTuple_GET_ITEM(rec, i_parent));
    if (inserted <= 0) return inserted;  /* refused: nothing changed, place_span's way */
    if (shorten_when_due(c->enc, c->lane) < 0 || phase_slice(c, rec, attrs, start, end, end_o) < 0) return -1;
    return 1;
}

/* What place_in does for each of a session's phases, for all of them at once where each would
 * go there as a leaf of the session's interval, one after the other: the session's interval
 * is its lane's last root interval, with no children yet; each phase lies within it (so
 * lane_insert would step into it), starts where the one before ended or later (so it would
 * be appended), and none would make the lane shorten its history (its count stays below
 * next_prune). Their intervals are then written packed, as Lane.pack_last leaves them once
 * the session and its phases are placed, without a level of lists made for them first
 * (about 2,500 instructions a phase less), and the lane's count and the encoder's clock move
 * on as n inserts move them. 1 done; 0 not this case, nothing changed; -1 an error. */
static int place_packed(BundleLane *c, PyObject *const *pairs, Py_ssize_t n) {
    if (!c->usable || n < 1 || n > BUNDLE_MAX || Py_TYPE(c->lane) != t_lane) return 0;
    PyObject *root = SLOT(c->lane, o_lane_root), *starts, *ends, *ids, *kids, *pruned = SLOT(c->lane, o_lane_pruned);
    if (!root || !pruned || Py_TYPE(root) != t_level || level_lists(root, &starts, &ends, &ids, &kids) < 0) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t last = PyList_GET_SIZE(ids) - 1;
    long long a, b, count, next_prune, before = LLONG_MIN;
    if (last < 0 || PyList_GET_SIZE(starts) != last + 1 || PyList_GET_SIZE(ends) != last + 1
        || PyList_GET_SIZE(kids) != last + 1 || PyList_GET_ITEM(kids, last) != Py_None
        || !as_int64(PyList_GET_ITEM(starts, last), &a) || !as_int64(PyList_GET_ITEM(ends, last), &b)
        || !as_int64(SLOT(c->lane, o_lane_count), &count) || !as_int64(SLOT(c->lane, o_lane_next), &next_prune)
        || count + n >= next_prune)
        return 0;
    if (PyFloat_CheckExact(pruned)) {
        if (!(isinf(PyFloat_AS_DOUBLE(pruned)) && PyFloat_AS_DOUBLE(pruned) < 0)) return 0;
    } else if (!as_int64(pruned, &before)) {
        return 0;
    }
    int same = same_value(PyList_GET_ITEM(ids, last), c->session);
    if (same <= 0) return same;
    long long at[BUNDLE_MAX][2];
    unsigned long long span_ids[BUNDLE_MAX];
    PyObject *end_os[BUNDLE_MAX];
    long long prev_end = LLONG_MIN;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *rec = PyTuple_GET_ITEM(pairs[k], 0);
        long long start, end;
        /* place_in's conditions, then lane_insert's path into the session's interval */
        int fits = phase_on_lane(c, rec, PyTuple_GET_ITEM(pairs[k], 1), &start, &end, &end_os[k]);
        if (fits <= 0) return fits;
        if (!as_uint64(PyTuple_GET_ITEM(rec, i_span), &span_ids[k])
            || !(a <= start && start < b && a < end && end <= b && start >= prev_end && start >= before))
            return 0;
        at[k][0] = start;
        at[k][1] = end;
        prev_end = end;
    }
    PyObject *packed = PyBytes_FromStringAndSize(NULL, n * PACKED_SIZE), *num = PyLong_FromLongLong(count + n);
    if (!packed || !num) {
        Py_XDECREF(packed);
        Py_XDECREF(num);
        return -1;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(packed);
    for (Py_ssize_t k = 0; k < n; k++, p += PACKED_SIZE) {
        put_le64(p, (unsigned long long)at[k][0]);
        put_le64(p + 8, (unsigned long long)at[k][1]);
        put_le64(p + 16, span_ids[k]);
    }
    PyList_SetItem(kids, last, packed);  /* steals it */
    set_slot(c->lane, o_lane_count, num);
    for (Py_ssize_t k = 0; k < n; k++)
        if (phase_slice(c, PyTuple_GET_ITEM(pairs[k], 0), PyTuple_GET_ITEM(pairs[k], 1), at[k][0], at[k][1], end_os[k]) < 0)
            return -1;
    return 1;
}

/* One of a session's spans under the session span just placed on lane `prefer`: on that lane
 * (place_in) where it can go there as a bundled phase: 0; else place_span's way, which may
 * change the lanes c holds (bundle_open finds them again): 1; -1 an error. */
static int place_under(BundleLane *c, PyObject *rec, PyObject *attrs, PyObject *prefer) {
    int r = place_in(c, rec, attrs);
    if (r) return r < 0 ? -1 : 0;
    PyObject *lane = place_one(c->enc, rec, c->proc, attrs, c->out, prefer);
    Py_XDECREF(lane);
    return lane ? 1 : -1;
}

/* The spans that waited for a session, outer first, each placed (under `prefer` when given;
 * `session`: the session span's id where it was just placed there, else NULL). */
static int place_waiting(PyObject *enc, PyObject *waiting, PyObject *out, PyObject *prefer, PyObject *session,
                         int counted) {
    if (!PyList_CheckExact(waiting)) { PyErr_SetString(PyExc_TypeError, "waiting spans must be a list"); return -1; }
    if (counted && add_count(enc, -PyList_GET_SIZE(waiting)) < 0) return -1;
    int sorted = sort_outer_first(waiting);
    if (sorted < 0) return -1;
    if (!sorted) {
        PyObject *argv[2] = {waiting, outer_first};
        PyObject *r = PyObject_VectorcallMethod(s_sort, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, sort_kwnames);
        if (!r) return -1;
        Py_DECREF(r);
    }
    int r = 0, stale = 1;
    BundleLane c = {0};
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(waiting) && r == 0; k++) {
        PyObject *item = PyList_GET_ITEM(waiting, k);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "a waiting span must be (record, attributes, process)");
            r = -1;
            break;
        }
        Py_INCREF(item);
        PyObject *proc = PyTuple_GET_ITEM(item, 2);
        if (stale || proc != c.proc) {  /* found again after place_span's way, or for another process */
            bundle_close(&c);
            r = bundle_open(&c, enc, proc, out, prefer, session);
        }
        if (r == 0) {
            stale = place_under(&c, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1), prefer);
            r = stale < 0 ? -1 : 0;
        }
        Py_DECREF(item);
    }
    bundle_close(&c);
    return r;
}

/* A bundled session's phases, n (record, attributes) pairs of process proc, placed under its
 * session span as place_waiting places them: from the pairs themselves where they are already
 * outer first (the order its sort keeps), else as the list it sorts. 0, or -1 on error. */
static int place_pairs(PyObject *enc, PyObject *const *pairs, Py_ssize_t n, PyObject *proc, PyObject *out,
                       PyObject *prefer, PyObject *session) {
    long long prev_start = 0, prev_end = 0;
    int sorted = 1;
    for (Py_ssize_t k = 0; k < n && sorted; k++) {
        PyObject *rec = PyTuple_GET_ITEM(pairs[k], 0);
        long long start = 0, end = 0;
        sorted = PyTuple_CheckExact(rec) && PyTuple_GET_SIZE(rec) == n_fields
                 && as_int64(PyTuple_GET_ITEM(rec, i_start), &start) && as_int64(PyTuple_GET_ITEM(rec, i_end), &end)
                 && end != LLONG_MIN
                 /* outer first: by start, then the later end first */
                 && !(k && (start < prev_start || (start == prev_start && end > prev_end)));
        prev_start = start;
        prev_end = end;
    }
    if (!sorted) {
        PyObject *waiting = PyList_New(n);
        if (!waiting) return -1;
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *entry = PyTuple_Pack(3, PyTuple_GET_ITEM(pairs[k], 0), PyTuple_GET_ITEM(pairs[k], 1), proc);
            if (!entry) {
                Py_DECREF(waiting);
                return -1;
            }
            PyList_SET_ITEM(waiting, k, entry);
        }
        int r = place_waiting(enc, waiting, out, prefer, session, 0);
        Py_DECREF(waiting);
        return r;
    }
    BundleLane c = {0};
    if (bundle_open(&c, enc, proc, out, prefer, session) < 0) {
        bundle_close(&c);
        return -1;
    }
    int r = place_packed(&c, pairs, n), stale = 0;
    if (r != 0) {
        bundle_close(&c);
        return r < 0 ? -1 : 0;
    }
    for (Py_ssize_t k = 0; k < n && r == 0; k++) {
        if (stale) {
            bundle_close(&c);
            if (bundle_open(&c, enc, proc, out, prefer, session) < 0) { r = -1; break; }
        }
        stale = place_under(&c, PyTuple_GET_ITEM(pairs[k], 0), PyTuple_GET_ITEM(pairs[k], 1), prefer);
        if (stale < 0) r = -1;
    }
    bundle_close(&c);
    return r;
}

/* _release: the spans waiting under `key`, placed where they fit. */
static int release(PyObject *enc, PyObject *buffered, PyObject *key, PyObject *out) {
    PyObject *waiting = dict_pop(buffered, key);
    if (!waiting) return PyErr_Occurred() ? -1 : 0;
    int t = PyObject_IsTrue(waiting), r = t;
    if (t > 0) r = place_waiting(enc, waiting, out, Py_None, NULL, 1);
    Py_DECREF(waiting);
    return r < 0 ? -1 : 0;
}

static PyObject *first_key(PyObject *dict) {  /* next(iter(dict)), borrowed */
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    return PyDict_Next(dict, &pos, &key, &value) ? key : NULL;
}

static int release_stale(PyObject *enc, PyObject *buffered, PyObject *out) {
    Batch *b = live(enc);
    PyObject *newest = b ? PyLong_FromLongLong(b->newest) : attr(enc, a_newest_end), *wait = attr(enc, a_session_wait);
    PyObject *limit = newest && wait ? PyNumber_Subtract(newest, wait) : NULL;
    Py_XDECREF(newest);
    Py_XDECREF(wait);
    if (!limit) return -1;
    int r = 0;
    while (r == 0 && PyDict_GET_SIZE(buffered)) {
        PyObject *key = Py_NewRef(first_key(buffered));
        PyObject *waiting = PyDict_GetItemWithError(buffered, key), *first;
        if (!waiting || !PyList_Check(waiting) || !PyList_GET_SIZE(waiting)
            || !PyTuple_Check(first = PyList_GET_ITEM(waiting, 0)) || !PyTuple_GET_SIZE(first)
            || !PyTuple_Check(PyTuple_GET_ITEM(first, 0))) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a session's waiting spans must be a list");
            r = -1;
        } else {
            int fresh = PyObject_RichCompareBool(PyTuple_GET_ITEM(PyTuple_GET_ITEM(first, 0), i_end), limit, Py_GE);
            if (fresh > 0) {
                Py_DECREF(key);
                break;
            }
            r = fresh < 0 ? -1 : release(enc, buffered, key, out);
        }
        Py_DECREF(key);
    }
    Py_DECREF(limit);
    return r;
}

/* _buffer: the span waits for its session span; past the bound the oldest session goes. */
static int buffer(PyObject *enc, PyObject *buffered, PyObject *key, PyObject *item, PyObject *out) {
    PyObject *waiting = PyDict_GetItemWithError(buffered, key);
    if (!waiting) {
        if (PyErr_Occurred() || !(waiting = PyList_New(0))) return -1;
        int r = PyDict_SetItem(buffered, key, waiting);
        Py_DECREF(waiting);
        if (r < 0) return -1;
    }
    if (!PyList_Check(waiting) || PyList_Append(waiting, item) < 0 || add_count(enc, 1) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a session's waiting spans must be a list");
        return -1;
    }
    for (;;) {
        PyObject *count = attr(enc, a_buffered_count), *bound = attr(enc, a_max_buffered);
        int over = count && bound ? PyObject_RichCompareBool(count, bound, Py_GT) : -1;
        Py_XDECREF(count);
        Py_XDECREF(bound);
        if (over <= 0) return over;
        PyObject *argv[1] = {enc};
        if (call_out(enc, s_released_early, argv, 1) < 0) return -1;
        PyObject *oldest = first_key(buffered);
        if (!oldest) return 0;
        Py_INCREF(oldest);
        int r = release(enc, buffered, oldest, out);
        Py_DECREF(oldest);
        if (r < 0) return -1;
    }
}

static PyObject *add_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "add_span(encoder, rec, attrs, proc, out)");
        return NULL;
    }
    return add_span_given(args[0], args[1], args[2], args[3], args[4], NULL, NULL, 0);
}

/* add_span, for a session span whose spans to place under it are `given` (not NULL: a list of
 * (record, attributes, process)), or `pairs` (not NULL: n_pairs (record, attributes) pairs of
 * this process), rather than waiting in _buffered, nor counted there. */
static PyObject *add_span_given(PyObject *enc, PyObject *rec, PyObject *attrs, PyObject *proc, PyObject *out,
                                PyObject *given, PyObject *const *pairs, Py_ssize_t n_pairs) {
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || !PyDict_Check(attrs)
        || Py_TYPE(proc) != t_proc) {
        PyErr_SetString(PyExc_TypeError, "add_span: a record, its attributes and a ProcessLanes");
        return NULL;
    }
    PyObject *span_kind = PyDict_GetItemWithError(attrs, k_span_kind);
    if (!span_kind && PyErr_Occurred()) return NULL;
    if (is_text(span_kind, kind_counter)) {
        PyObject *argv[5] = {enc, rec, attrs, proc, out};
        return call_out(enc, s_counter_line, argv, 5) < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *span_id = PyTuple_GET_ITEM(rec, i_span), *parent_id = PyTuple_GET_ITEM(rec, i_parent);
    int has_parent = PyObject_IsTrue(parent_id);
    int remote = has_parent > 0 ? PyObject_IsTrue(PyTuple_GET_ITEM(rec, i_remote)) : 0;
    if (has_parent < 0 || remote < 0) return NULL;
    int local_root = !has_parent || remote;
    PyObject *result = NULL, *parent_of = NULL, *buffered = NULL, *key = NULL, *lane = NULL, *newest = NULL;
    PyObject *foreign = NULL, *session_lane = NULL;
    if (!(parent_of = attr(enc, a_parent_of)) || !(buffered = attr(enc, a_buffered))) goto done;
    if (Py_TYPE(parent_of) != t_map || !PyDict_CheckExact(buffered)) {
        PyErr_SetString(PyExc_TypeError, "the encoder's _parent_of and _buffered");
        goto done;
    }
    if (!local_root && !bundled_phase(rec) && map_set(parent_of, span_id, parent_id) < 0) goto done;
    PyObject *end = PyTuple_GET_ITEM(rec, i_end);
    Batch *b = live(enc);
    long long end_ns;
    if (b && as_int64(end, &end_ns)) {
        if (end_ns > b->newest) {
            b->newest = end_ns;
            b->dirty = 1;
        }
    } else {
        Handover h;
        if (hand_out(enc, &h) < 0) goto done;
        newest = attr(enc, a_newest_end);
        int later = newest ? PyObject_RichCompareBool(end, newest, Py_GT) : -1;
        if (later > 0 && PyObject_SetAttr(enc, a_newest_end, end) < 0) later = -1;
        if (take_back(&h) < 0 || later < 0) goto done;
    }
    PyObject *session = PyDict_GetItemWithError(attrs, k_session_id);
    if (!session && PyErr_Occurred()) goto done;
    if (!session || session == Py_None) {
        if (!(lane = place_one(enc, rec, proc, attrs, out, Py_None))) goto done;
    } else {
        PyObject *pid = SLOT(proc, o_proc_pid);
        if (!pid || !(key = PyTuple_Pack(2, pid, session))) goto done;
        if (!(foreign = attr(enc, a_foreign)) || !(session_lane = attr(enc, a_session_lane))) goto done;
        if (Py_TYPE(foreign) != t_map || Py_TYPE(session_lane) != t_map) {
            PyErr_SetString(PyExc_TypeError, "the encoder's session maps");
            goto done;
        }
        int r;
        if (is_text(span_kind, kind_session)) {
            if (!(lane = place_one(enc, rec, proc, attrs, out, Py_None)) || map_set(session_lane, key, lane) < 0) goto done;
            PyObject *waiting = given ? Py_NewRef(given) : pairs ? NULL : dict_pop(buffered, key);
            if (!waiting && PyErr_Occurred()) goto done;
            int t = pairs ? n_pairs > 0 : waiting ? PyObject_IsTrue(waiting) : 0;
            if (pairs) r = t ? place_pairs(enc, pairs, n_pairs, proc, out, lane, span_id) : 0;
            else r = t < 0 ? -1 : t ? place_waiting(enc, waiting, out, lane, span_id, !given) : 0;
            if (r == 0 && t > 0) r = pack_last(lane, span_id);
            Py_XDECREF(waiting);
            if (r < 0) goto done;
        } else if ((r = map_has(foreign, key))) {
            if (r < 0 || !(lane = place_one(enc, rec, proc, attrs, out, Py_None))) goto done;
        } else {
            PyObject *prefer = map_get(session_lane, key);
            if (!prefer && PyErr_Occurred()) goto done;
            if (prefer) {  /* outlived its session span */
                Py_INCREF(prefer);
                lane = place_one(enc, rec, proc, attrs, out, prefer);
                Py_DECREF(prefer);
                if (!lane) goto done;
            } else if (local_root) {
                /* A local root that is not the session span: this process works for a session
                 * whose span lives elsewhere, so nothing is worth waiting for. */
                if (map_set(foreign, key, Py_True) < 0) goto done;
                if ((r = PyDict_Contains(buffered, key)) < 0 || (r && release(enc, buffered, key, out) < 0)) goto done;
                if (!(lane = place_one(enc, rec, proc, attrs, out, Py_None))) goto done;
            } else {
                PyObject *item = PyTuple_Pack(3, rec, attrs, proc);
                r = item ? buffer(enc, buffered, key, item, out) : -1;
                Py_XDECREF(item);
                if (r < 0) goto done;
            }
        }
    }
    if (PyDict_GET_SIZE(buffered) && release_stale(enc, buffered, out) < 0) goto done;
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(parent_of);
    Py_XDECREF(buffered);
    Py_XDECREF(key);
    Py_XDECREF(lane);
    Py_XDECREF(newest);
    Py_XDECREF(foreign);
    Py_XDECREF(session_lane);
    return result;
}

/* A session's spans that come in the batch right before its session span (its bundled phases,
 * which the exporter expands ahead of it) would each take add_span's way to _buffered, one at a
 * time, and wait there until the session span comes next and places them under it. Where nothing
 * else could happen meanwhile, they are put there as one list instead: the same spans, placed the
 * same way, without a buffering step (key, maps, count, bound, stale check) per span. Nothing else
 * happens meanwhile when each would be buffered (a span of the session, not its span nor a
 * counter, with a local parent), the session has no lane, no foreign mark and nothing waiting yet,
 * the bound has room for all of them, and the stale check (the newest end less the session wait,
 * against the first waiting span of the first session) would release nothing even with the
 * newest end among them. Returns how many spans it put there (the walk goes on with the session
 * span), 0 where it put none, -1 on error. *looked_to: the index up to which no run can start
 * (a run the walk would find starting inside this one would not pass these checks either, and a
 * run not taken only means the spans take add_span's way). */
#define WAIT_AS_ONE_MAX 32
static Py_ssize_t wait_as_one(Batch *b, PyObject *const *items, Py_ssize_t n_items, Py_ssize_t k,
                              Py_ssize_t *looked_to, PyObject **handoff) {
    Py_ssize_t j = k;
    *looked_to = k + 1;
    if (!b->proc) return 0;
    PyObject *session = NULL;
    long long newest = b->newest, first_end = 0;
    for (;; j++) {
        *looked_to = j > k ? j : k + 1;  /* a span that ends the scan may still start a run */
        if (j == n_items || j - k > WAIT_AS_ONE_MAX) return 0;
        PyObject *item = items[j], *rec, *attrs;
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 || !PyTuple_CheckExact(rec = PyTuple_GET_ITEM(item, 0))
            || PyTuple_GET_SIZE(rec) != n_fields || !PyDict_CheckExact(attrs = PyTuple_GET_ITEM(item, 1)))
            return 0;
        PyObject *kind = PyDict_GetItemWithError(attrs, k_span_kind);
        PyObject *id = kind || !PyErr_Occurred() ? PyDict_GetItemWithError(attrs, k_session_id) : NULL;
        if (!id || id == Py_None || is_text(kind, kind_counter)) return PyErr_Occurred() ? -1 : 0;
        int same = session ? same_value(id, session) : 1;
        if (same <= 0) return same;
        if (is_text(kind, kind_session)) break;
        long long end;
        int has_parent = PyObject_IsTrue(PyTuple_GET_ITEM(rec, i_parent));
        if (has_parent <= 0 || PyTuple_GET_ITEM(rec, i_remote) != Py_False || !as_int64(PyTuple_GET_ITEM(rec, i_end), &end))
            return has_parent < 0 ? -1 : 0;
        if (!session) {
            session = id;
            first_end = end;
        }
        if (end > newest) newest = end;
    }
    Py_ssize_t n = j - k;
    *looked_to = j + 1;
    if (!n) return 0;  /* the session span alone: add_span's way */
    PyObject *enc = b->enc, *key = NULL, *foreign = NULL, *lanes = NULL, *count = NULL, *bound = NULL, *wait = NULL;
    PyObject *waiting = NULL, *pid = SLOT(b->proc, o_proc_pid);
    Py_ssize_t result = -1;
    long long c, limit, w;
    if (!pid || !(key = PyTuple_Pack(2, pid, session)) || !(foreign = attr(enc, a_foreign))
        || !(lanes = attr(enc, a_session_lane)) || !(count = attr(enc, a_buffered_count))
        || !(bound = attr(enc, a_max_buffered)) || !(wait = attr(enc, a_session_wait)))
        goto done;
    result = 0;
    if (Py_TYPE(foreign) != t_map || Py_TYPE(lanes) != t_map || !as_int64(count, &c) || !as_int64(bound, &limit)
        || c + n > limit || !as_int64(wait, &w) || newest - w > newest)
        goto done;
    int r;
    if ((r = map_has(foreign, key)) || (r = map_has(lanes, key)) || (r = PyDict_Contains(b->buffered, key))) {
        result = r < 0 ? -1 : 0;
        goto done;
    }
    if (PyDict_GET_SIZE(b->buffered)) {  /* the first session's first waiting span */
        PyObject *first = PyDict_GetItemWithError(b->buffered, first_key(b->buffered)), *it;
        if (!first || !PyList_CheckExact(first) || !PyList_GET_SIZE(first) || !PyTuple_Check(it = PyList_GET_ITEM(first, 0))
            || !PyTuple_GET_SIZE(it) || !PyTuple_CheckExact(PyTuple_GET_ITEM(it, 0))
            || PyTuple_GET_SIZE(PyTuple_GET_ITEM(it, 0)) != n_fields
            || !as_int64(PyTuple_GET_ITEM(PyTuple_GET_ITEM(it, 0), i_end), &first_end)) {
            result = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
    }
    if (first_end < newest - w) goto done;  /* the stale check would release something */
    int all_bundled = 1;
    for (Py_ssize_t m = 0; m < n && all_bundled; m++) all_bundled = bundled_phase(PyTuple_GET_ITEM(items[k + m], 0));
    if (handoff && all_bundled) {  /* no map entry to make: the session span's placement takes the pairs */
        if (newest > b->newest) {
            b->newest = newest;
            b->dirty = 1;
        }
        *handoff = Py_NewRef(Py_None);
        result = n;
        goto done;
    }
    result = -1;
    if (!(waiting = PyList_New(n))) goto done;
    for (Py_ssize_t m = 0; m < n; m++) {
        PyObject *item = items[k + m], *rec = PyTuple_GET_ITEM(item, 0);
        PyObject *entry = PyTuple_Pack(3, rec, PyTuple_GET_ITEM(item, 1), b->proc);
        if (!entry) goto done;
        PyList_SET_ITEM(waiting, m, entry);
        if (!bundled_phase(rec) && map_set(b->parent_of, PyTuple_GET_ITEM(rec, i_span), PyTuple_GET_ITEM(rec, i_parent)) < 0)
            goto done;
    }
    if (newest > b->newest) {
        b->newest = newest;
        b->dirty = 1;
    }
    if (handoff) {  /* to the session span's add_span_given: nothing waits in _buffered meanwhile */
        *handoff = Py_NewRef(waiting);
    } else if (PyDict_SetItem(b->buffered, key, waiting) < 0 || add_count(enc, n) < 0) {
        goto done;
    }
    result = n;
done:
    Py_XDECREF(key);
    Py_XDECREF(foreign);
    Py_XDECREF(lanes);
    Py_XDECREF(count);
    Py_XDECREF(bound);
    Py_XDECREF(wait);
    Py_XDECREF(waiting);
    return result;
}

/* --- configure ---------------------------------------------------------------------------- */
static int take_type(PyObject *config, const char *key, PyTypeObject **slot) {
    PyObject *v = NULL;
    if (take(config, key, &v) < 0) return -1;
    if (!PyType_Check(v)) { Py_DECREF(v); PyErr_Format(PyExc_TypeError, "%s must be a class", key); return -1; }
    Py_XSETREF(*slot, (PyTypeObject *)v);
    return 0;
}

/* configure(dict): the classes, keys, record indices and the line writer encode_records uses. */
static PyObject *configure(PyObject *self, PyObject *config) {
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes a dict");
        return NULL;
    }
    Py_ssize_t client = 0, producer = 0;
    if (take_type(config, "TwoGenerationMap", &t_map) || take_type(config, "Lane", &t_lane)
        || take_type(config, "LaneLevel", &t_level) || take_type(config, "LaneGroup", &t_group)
        || take_type(config, "ProcessLanes", &t_proc)
        || slot_offset(t_map, "cap", &o_map_cap) || slot_offset(t_map, "young", &o_map_young)
        || slot_offset(t_map, "old", &o_map_old) || slot_offset(t_lane, "index", &o_lane_index)
        || slot_offset(t_lane, "tid", &o_lane_tid) || slot_offset(t_lane, "root", &o_lane_root)
        || slot_offset(t_lane, "count", &o_lane_count) || slot_offset(t_lane, "max_end", &o_lane_max_end)
        || slot_offset(t_lane, "pruned_before", &o_lane_pruned) || slot_offset(t_lane, "next_prune", &o_lane_next)
        || slot_offset(t_level, "starts", &o_level_starts) || slot_offset(t_level, "ends", &o_level_ends)
        || slot_offset(t_level, "ids", &o_level_ids) || slot_offset(t_level, "kids", &o_level_kids)
        || slot_offset(t_group, "lanes", &o_group_lanes) || slot_offset(t_group, "used", &o_group_used)
        || slot_offset(t_proc, "pid", &o_proc_pid) || slot_offset(t_proc, "groups", &o_proc_groups)
       
        || take(config, "SPAN_KIND", &k_span_kind) || take(config, "SESSION_ID", &k_session_id)
        || take(config, "THREAD_ID", &k_thread_id) || take(config, "GAUGE_VALUE", &k_gauge)
        || take(config, "CONTEXT_SENT", &k_context_sent) || take(config, "CATEGORY", &k_category)
        || take(config, "KIND_COUNTER", &kind_counter) || take(config, "KIND_INSTANT", &kind_instant)
        || take(config, "KIND_SESSION", &kind_session) || take(config, "default_category", &default_cat)
        || take_index(config, "CLIENT", &client) || take_index(config, "PRODUCER", &producer)
        || take_index(config, "TRACE_ID", &i_trace) || take_index(config, "SPAN_ID", &i_span)
        || take_index(config, "PARENT_ID", &i_parent) || take_index(config, "PARENT_REMOTE", &i_remote)
        || take_index(config, "START", &i_start) || take_index(config, "END", &i_end)
        || take_index(config, "KIND", &i_kind) || take_index(config, "EVENTS", &i_events)
        || take_index(config, "LINKS", &i_links) || take_index(config, "fields", &n_fields)
        || take_index(config, "NAME", &i_name) || take_index(config, "ATTRIBUTES", &i_attributes)
        || take(config, "phase_attributes", &phase_attributes)
        || take_index(config, "max_waiting_children", &max_waiting)
        || take(config, "outer_first", &outer_first) || take(config, "complete", &complete_fn)
        || take(config, "flows", &flows_fn))
        return NULL;
    client_kind = (long)client;
    producer_kind = (long)producer;
    if (!(lines_api = PyCapsule_Import(CHROME_LINES_API, 0))) {
        Py_CLEAR(complete_fn);
        return NULL;
    }
    if (!PyUnicode_CheckExact(kind_counter) || !PyUnicode_CheckExact(kind_instant)
        || !PyUnicode_CheckExact(kind_session)) {
        Py_CLEAR(complete_fn);
        PyErr_SetString(PyExc_TypeError, "configure(): span kinds must be str");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "Sets the classes, keys and line writer encode_records() uses."},
    {"add_span", (PyCFunction)(void (*)(void))add_span, METH_FASTCALL,
     "ChromeTraceEncoder._add: one span, held for its session span or placed."},
    {"place_span", (PyCFunction)(void (*)(void))place_span, METH_FASTCALL,
     "ChromeTraceEncoder._place: places one span, returns (group, lane index)."},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "Places a batch of (record, attributes) pairs, handing each item it does not take to slow(item, out)."},
    {"micros_of", micros_of, METH_O, "ns / 1000 as the placement computes it (for the tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chrome_place", NULL, -1, methods};

#define INTERN(var, text) if (!((var) = PyUnicode_InternFromString(text))) goto failed

PyMODINIT_FUNC PyInit__chrome_place(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (!(thousand = PyLong_FromLong(1000)) || !(one = PyLong_FromLong(1))) goto failed;
    INTERN(hex_spec, "032x");
    INTERN(s_shorten, "shorten");
    INTERN(s_release_stale, "_release_stale");
    INTERN(a_placed, "_placed");
    INTERN(a_parent_of, "_parent_of");
    INTERN(a_waiting, "_waiting");
    INTERN(a_buffered, "_buffered");
    INTERN(a_newest_end, "_newest_end");
    INTERN(a_clock, "_clock");
    INTERN(a_trace_hex, "_trace_hex");
    INTERN(a_record_proc, "_record_proc");
    INTERN(a_horizon, "_horizon_ns");
    INTERN(a_max_intervals, "_max_intervals");
    INTERN(a_prune_step, "_prune_step");
    INTERN(a_complete_line, "_complete_line");
    INTERN(s_group, "_group");
    INTERN(s_new_lane, "_new_lane");
    INTERN(s_slice, "_slice");
    INTERN(s_link, "_link");
    INTERN(s_extras, "_extras");
    INTERN(s_remote_flow, "_remote_flow");
    INTERN(s_flow_source, "_flow_source");
    INTERN(s_flows_dropped, "_flows_dropped");
    INTERN(a_foreign, "_foreign_sessions");
    INTERN(a_session_lane, "_session_lane");
    INTERN(a_buffered_count, "_buffered_count");
    INTERN(a_max_buffered, "_max_buffered");
    INTERN(a_session_wait, "_session_wait_ns");
    INTERN(s_counter_line, "_counter_line");
    INTERN(s_released_early, "_released_early");
    INTERN(s_encode_error, "_encode_error");
    INTERN(s_sort, "sort");
    if (!(sort_kwnames = Py_BuildValue("(s)", "key"))) goto failed;
    return m;
failed:
    Py_DECREF(m);
    return NULL;
}
