/* The compiled twin of the Chrome trace encoder's common case (chrome_trace.py).
 *
 * encode_records(encoder, items, out, slow) walks one batch of (record, flat attributes)
 * pairs in order. A span that simply follows what its thread's first open lane already
 * holds (no session to wait for, no children placed before it, no flows to draw, no
 * counter, no events) is placed here, with the effects ChromeTraceEncoder._add and _place
 * have on the encoder's state, and its line comes from _chrome_lines.complete(). Any other
 * item goes to slow(item, out), the encoder's own Python step, so the order of placement,
 * and with it the output, is the Python encoder's. The checks come before any change, so
 * an item handed on has changed nothing.
 *
 * The lanes' state lives in Python objects with __slots__ (lanes.py); their slots are read
 * through the offsets of the classes' member descriptors, found once in configure().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

static PyObject *complete_fn;  /* _chrome_lines.complete */
static PyTypeObject *t_map, *t_lane, *t_level, *t_group, *t_proc;
static Py_ssize_t o_map_cap, o_map_young, o_map_old;
static Py_ssize_t o_lane_index, o_lane_tid, o_lane_root, o_lane_count, o_lane_max_end, o_lane_pruned,
    o_lane_next;
static Py_ssize_t o_level_starts, o_level_ends, o_level_ids, o_level_kids;
static Py_ssize_t o_group_lanes, o_group_used;
static Py_ssize_t o_proc_pid, o_proc_groups, o_proc_rank, o_proc_role;
static PyObject *k_span_kind, *k_session_id, *k_thread_id, *k_gauge, *k_context_sent, *k_category;
static PyObject *kind_counter, *kind_instant, *kind_session, *default_cat;
static long client_kind, producer_kind;
static Py_ssize_t i_trace, i_span, i_parent, i_remote, i_start, i_end, i_kind, i_events, i_links, n_fields;
static Py_ssize_t max_waiting;
static PyObject *thousand, *hex_spec, *s_shorten, *s_release_stale;
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

/* --- one batch -------------------------------------------------------------------------- */
typedef struct {
    PyObject *enc, *out;
    PyObject *placed, *parent_of, *waiting, *buffered, *proc;  /* new references */
    PyObject *horizon, *max_intervals, *prune_step;
    long long clock, newest;
    PyObject *trace_id, *trace_hex;  /* new references: the latest trace id and its text */
} Batch;

static int as_ll(PyObject *v, long long *x) {  /* 1 when v is an int that fits */
    if (!PyLong_CheckExact(v)) return 0;
    int overflow;
    *x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (*x == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return !overflow;
}

static int load(Batch *b) {  /* the encoder's state that Python may have changed */
    PyObject *v;
    long long x = 0;
    if (!(v = PyObject_GetAttr(b->enc, a_clock))) return -1;
    int ok = as_ll(v, &x);
    Py_DECREF(v);
    b->clock = x;
    if (!(v = PyObject_GetAttr(b->enc, a_newest_end))) return -1;
    ok = ok && as_ll(v, &x);
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
    return 0;
}

static int store(Batch *b) {  /* what this file changed, back into the encoder */
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

/* f"{trace_id:032x}" */
static PyObject *trace_text(PyObject *trace_id) {
    unsigned char raw[16];
    int r;
#if PY_VERSION_HEX >= 0x030D0000
    r = _PyLong_AsByteArray((PyLongObject *)trace_id, raw, 16, 0, 0, 0);
#else
    r = _PyLong_AsByteArray((PyLongObject *)trace_id, raw, 16, 0, 0);
#endif
    if (r < 0) {
        PyErr_Clear();
        return PyObject_Format(trace_id, hex_spec);
    }
    static const char hex[] = "0123456789abcdef";
    char text[32];
    for (int k = 0; k < 16; k++) {
        text[2 * k] = hex[raw[k] >> 4];
        text[2 * k + 1] = hex[raw[k] & 15];
    }
    return PyUnicode_FromStringAndSize(text, 32);
}

static int truthy_list(PyObject *v) {  /* events or links: None or a list, anything else counts */
    if (v == Py_None) return 0;
    if (PyList_CheckExact(v)) return PyList_GET_SIZE(v) != 0;
    return 1;
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
    if (!as_ll(PyTuple_GET_ITEM(rec, i_kind), &kind) || kind == client_kind || kind == producer_kind) return 0;
    PyObject *groups = SLOT(proc, o_proc_groups);
    if (!groups || !PyDict_CheckExact(groups)) return 0;
    PyObject *group = PyDict_GetItemWithError(groups, thread);
    if (!group || Py_TYPE(group) != t_group) return PyErr_Occurred() ? -1 : 0;

    PyObject *start_o = PyTuple_GET_ITEM(rec, i_start), *end_o = PyTuple_GET_ITEM(rec, i_end);
    PyObject *span_id = PyTuple_GET_ITEM(rec, i_span), *parent_id = PyTuple_GET_ITEM(rec, i_parent);
    long long start, end, parent;
    if (!as_ll(start_o, &start) || !as_ll(end_o, &end) || !PyLong_CheckExact(span_id)) return 0;
    if (!as_ll(parent_id, &parent)) {
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
        } else if (!as_ll(pruned, &before)) {
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
        if (n && (!as_ll(PyList_GET_ITEM(ends, n - 1), &last) || last > start)) return 0;  /* it would nest */
        chosen = lane;
        root = level;
        break;
    }
    if (!chosen) return 0;  /* a new lane: Python makes it */
    PyObject *placed_end = end < start ? start_o : end_o;
    long long end_c = end < start ? start : end;

    PyObject *pid = SLOT(proc, o_proc_pid), *tid = SLOT(chosen, o_lane_tid);
    PyObject *rank = SLOT(proc, o_proc_rank), *role = SLOT(proc, o_proc_role);
    if (!pid || !tid || !rank || !role) return 0;
    PyObject *cat = PyDict_GetItemWithError(attrs, k_category);
    if (!cat && PyErr_Occurred()) return -1;
    int t = cat ? PyObject_IsTrue(cat) : 0;
    if (t < 0) return -1;
    if (!t) {
        t = span_kind ? PyObject_IsTrue(span_kind) : 0;
        cat = t ? span_kind : default_cat;
    }
    PyObject *trace_id = PyTuple_GET_ITEM(rec, i_trace);
    if (!PyLong_CheckExact(trace_id)) return 0;
    int same = PyObject_RichCompareBool(b->trace_id, trace_id, Py_EQ);
    if (same < 0) return -1;
    if (!same) {
        PyObject *text = trace_text(trace_id);
        if (!text) return -1;
        Py_SETREF(b->trace_id, Py_NewRef(trace_id));
        Py_SETREF(b->trace_hex, text);
    }
    PyObject *ts = PyNumber_TrueDivide(start_o, thousand);
    if (!ts) return -1;
    PyObject *dur = PyFloat_FromDouble((double)(end_c - start) / 1000.0);
    if (end_c - start >= (1LL << 53)) {  /* past exact doubles: Python's exact division */
        Py_XDECREF(dur);
        PyObject *d = PyLong_FromLongLong(end_c - start);
        dur = d ? PyNumber_TrueDivide(d, thousand) : NULL;
        Py_XDECREF(d);
    }
    if (!dur) { Py_DECREF(ts); return -1; }
    PyObject *args[10] = {rec, attrs, cat, ts, dur, pid, tid, rank, role, b->trace_hex};
    PyObject *line = PyObject_Vectorcall(complete_fn, args, 10, NULL);
    Py_DECREF(dur);
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
    if (!as_ll(SLOT(chosen, o_lane_count), &count) || !as_ll(SLOT(chosen, o_lane_max_end), &max_end)
        || !as_ll(SLOT(chosen, o_lane_next), &next_prune)) {
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
    if (get_map(b.enc, a_placed, &b.placed) || get_map(b.enc, a_parent_of, &b.parent_of)
        || get_map(b.enc, a_waiting, &b.waiting) || !(b.buffered = PyObject_GetAttr(b.enc, a_buffered))
        || !(b.horizon = PyObject_GetAttr(b.enc, a_horizon))
        || !(b.max_intervals = PyObject_GetAttr(b.enc, a_max_intervals))
        || !(b.prune_step = PyObject_GetAttr(b.enc, a_prune_step)) || load(&b) < 0)
        goto failed;
    if (!PyDict_CheckExact(b.buffered)) {
        PyErr_SetString(PyExc_TypeError, "_buffered must be a dict");
        goto failed;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(items); k++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(items, k));
        int r = place(&b, item);
        if (r == 1 && PyDict_GET_SIZE(b.buffered)) {
            PyObject *done;
            if (store(&b) < 0 || !(done = PyObject_CallMethodOneArg(b.enc, s_release_stale, b.out))) r = -1;
            else { Py_DECREF(done); r = load(&b) < 0 ? -1 : 1; }
        } else if (r == 0) {
            PyObject *done;
            if (store(&b) < 0 || !(done = PyObject_CallFunctionObjArgs(slow, item, b.out, NULL))) r = -1;
            else { Py_DECREF(done); r = load(&b) < 0 ? -1 : 1; }
        }
        Py_DECREF(item);
        if (r < 0) goto failed;
    }
    if (store(&b) < 0) goto failed;
    batch_clear(&b);
    Py_RETURN_NONE;
failed:
    batch_clear(&b);
    return NULL;
}

/* --- configure ---------------------------------------------------------------------------- */
static int offset_of(PyTypeObject *cls, const char *name, Py_ssize_t *off) {
    PyObject *d = PyDict_GetItemString(cls->tp_dict, name);
    if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", cls->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", cls->tp_name, name);
        return -1;
    }
    *off = m->offset;
    return 0;
}

static int take(PyObject *config, const char *key, PyObject **slot) {
    PyObject *v = PyDict_GetItemString(config, key);
    if (!v) { PyErr_Format(PyExc_KeyError, "%s", key); return -1; }
    Py_XSETREF(*slot, Py_NewRef(v));
    return 0;
}

static int take_type(PyObject *config, const char *key, PyTypeObject **slot) {
    PyObject *v = NULL;
    if (take(config, key, &v) < 0) return -1;
    if (!PyType_Check(v)) { Py_DECREF(v); PyErr_Format(PyExc_TypeError, "%s must be a class", key); return -1; }
    Py_XSETREF(*slot, (PyTypeObject *)v);
    return 0;
}

static int take_index(PyObject *config, const char *key, Py_ssize_t *slot) {
    PyObject *v = PyDict_GetItemString(config, key);
    if (!v) { PyErr_Format(PyExc_KeyError, "%s", key); return -1; }
    Py_ssize_t i = PyLong_AsSsize_t(v);
    if (i < 0) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, key); return -1; }
    *slot = i;
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
        || offset_of(t_map, "cap", &o_map_cap) || offset_of(t_map, "young", &o_map_young)
        || offset_of(t_map, "old", &o_map_old) || offset_of(t_lane, "index", &o_lane_index)
        || offset_of(t_lane, "tid", &o_lane_tid) || offset_of(t_lane, "root", &o_lane_root)
        || offset_of(t_lane, "count", &o_lane_count) || offset_of(t_lane, "max_end", &o_lane_max_end)
        || offset_of(t_lane, "pruned_before", &o_lane_pruned) || offset_of(t_lane, "next_prune", &o_lane_next)
        || offset_of(t_level, "starts", &o_level_starts) || offset_of(t_level, "ends", &o_level_ends)
        || offset_of(t_level, "ids", &o_level_ids) || offset_of(t_level, "kids", &o_level_kids)
        || offset_of(t_group, "lanes", &o_group_lanes) || offset_of(t_group, "used", &o_group_used)
        || offset_of(t_proc, "pid", &o_proc_pid) || offset_of(t_proc, "groups", &o_proc_groups)
        || offset_of(t_proc, "rank", &o_proc_rank) || offset_of(t_proc, "role", &o_proc_role)
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
        || take_index(config, "max_waiting_children", &max_waiting)
        || take(config, "complete", &complete_fn))
        return NULL;
    client_kind = (long)client;
    producer_kind = (long)producer;
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
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "Places a batch of (record, attributes) pairs, handing each item it does not take to slow(item, out)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chrome_place", NULL, -1, methods};

#define INTERN(var, text) if (!((var) = PyUnicode_InternFromString(text))) goto failed

PyMODINIT_FUNC PyInit__chrome_place(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (!(thousand = PyLong_FromLong(1000))) goto failed;
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
    return m;
failed:
    Py_DECREF(m);
    return NULL;
}
