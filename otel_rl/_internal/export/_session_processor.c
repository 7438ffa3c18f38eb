/* The compiled twin of the session processor's derivation (session_processor.py).
 *
 * derive(processor, rec, attrs) -> dict, or None: what SessionSpanProcessor.on_record does for
 * a phase span (its instance kept under its session, its duration metric) or a session span
 * (its record appended, its metrics, and the attributes it gains), or None, having changed
 * nothing, for anything this file leaves to the Python step: policy versions, an eviction
 * (the pending-sessions bound reached), values the record would have to convert (text that is
 * not UTF-8, integers past int64, a phase name that is not text, a status that is not text).
 * Writing the record and recording the session's metrics are the processor's own methods
 * (_write_record, _session_metrics), so their error handling is the Python step's.
 */
#include "../_cext.h"
#include "../_json.h"
#include <time.h>

static PyObject *k_session_id, *k_phase, *k_interrupted, *k_version, *k_status, *k_reason, *k_task, *k_step,
    *k_submit_step, *k_total_s, *session_prefix, *counter_prefix, *status_pending, *builtin_phases,
    *optional_fields, *kind_phase;
static Py_ssize_t i_name, i_trace, i_span, i_start, i_end, i_status, i_flags, n_fields = -1;
static long error_code;
static PyObject *s_ok, *s_error, *s_interrupted, *s_phase, *s_write_record, *s_session_metrics;
static PyObject *a_phases, *a_versions, *a_statuses, *a_max_pending, *a_metrics, *a_rank, *a_role, *a_records;
static PyObject *f_task_id, *f_session_id, *f_rank, *f_role, *f_step, *f_status, *f_reason, *f_submit_ts,
    *f_finalized_ts, *f_total_s, *f_submit_step, *f_phase_counts, *f_phases, *f_counters, *f_trace_id, *f_span_id,
    *f_start_ts, *f_end_ts, *hex32, *hex16;
static PyObject *phase_keys;  /* phase name -> (name_s, prefix name_s, prefix name_count), bounded */
#define MAX_PHASE_KEYS 4096

/* Whether _plain(v) is v: text that is valid UTF-8, an integer within int64, anything else. */
static int plain(PyObject *v) {
    if (PyUnicode_Check(v)) {
        if (!PyUnicode_CheckExact(v)) return 0;
        if (PyUnicode_IS_ASCII(v)) return 1;
        if (PyUnicode_AsUTF8AndSize(v, NULL)) return 1;
        PyErr_Clear();
        return 0;
    }
    long long x;
    if (PyLong_CheckExact(v)) return as_int64(v, &x);
    return !PyLong_Check(v) || PyBool_Check(v);
}

static PyObject *get(PyObject *attrs, PyObject *key) {  /* attrs.get(key), borrowed (None when absent) */
    PyObject *v = PyDict_GetItemWithError(attrs, key);
    return v ? v : (PyErr_Occurred() ? NULL : Py_None);
}

static PyObject *seconds(long long ns) { return PyFloat_FromDouble((double)ns / 1e9); }

/* --- the aggregated metrics (session_metrics.AggregatedSessionMetrics), when they are those ---
 * The values of its phase() and session() this file records are kept in C (their key's parts,
 * the value, the clock, the exemplar's ids) and added to its points BUFFERED at a time, under
 * its lock, or before anything else reads or changes the points (its collect, phase and session
 * call drain_metrics under the lock). Each key's values are added once a drain, in the order they
 * came, with _histogram's and _add's arithmetic: the points are the lists the Python writes,
 * the sums the same floats to the last bit. Per value, the lock taken and each field updated as
 * a Python object cost about 2,000 instructions; buffered, about 150. */
static PyTypeObject *t_aggregated;
static PyObject *a_m_phase, *a_m_session, *a_m_sessions, *a_m_lock, *a_m_exemplars, *a_bounds, *a_points;
static PyObject *s_acquire, *s_release, *s_stale, *s_lower, *s_metrics_failed, *f_status_attr, *stale_mark, *one,
    *zero_int;

static PyObject *list_of(Py_ssize_t n, PyObject **items) {  /* a new list holding new references */
    PyObject *list = PyList_New(n);
    if (list) for (Py_ssize_t k = 0; k < n; k++) PyList_SET_ITEM(list, k, Py_NewRef(items[k]));
    return list;
}

static long long wall_ns(void) {  /* time.time_ns() */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int bump(PyObject *list, Py_ssize_t k, PyObject *by) {  /* list[k] += by */
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(list, k), by);
    return sum ? PyList_SetItem(list, k, sum) : -1;
}

static int bump_by(PyObject *list, Py_ssize_t k, long long n) {  /* list[k] += n */
    PyObject *by = PyLong_FromLongLong(n);
    int r = by ? bump(list, k, by) : -1;
    Py_XDECREF(by);
    return r;
}

/* The parts of an AggregatedSessionMetrics read here, fetched once per metrics object: its
 * __init__ sets them and nothing rebinds them (collection clears the points dicts in place),
 * so each value reads no attribute. The entry holds the metrics object, so its address is not
 * reused while cached. */
enum { I_PHASE, I_SESSION, I_SESSIONS, N_INSTRUMENTS };
#define MAX_BOUNDS 64
typedef struct {
    PyObject *metrics, *acquire, *release;  /* strong; acquire and release: its lock's bound methods */
    PyObject *points[N_INSTRUMENTS];  /* strong: each instrument's points dict */
    double bounds[N_INSTRUMENTS][MAX_BOUNDS];
    Py_ssize_t n_bounds[N_INSTRUMENTS];
    long exemplars;
} Parts;
static Parts parts;

/* A value waiting for the points of parts.metrics: a phase's (I_PHASE: phase, status) or a
 * session's (I_SESSION: status; it counts in I_SESSIONS too). The ids are held only where the
 * value is its bucket's exemplar candidate. */
typedef struct {
    int k;
    PyObject *phase, *status, *trace_id, *span_id;  /* strong; phase NULL for a session */
    double x;
    long long now;
    Py_ssize_t bucket;
} Pending;
#define BUFFERED 1024
static Pending pending[BUFFERED];
static Py_ssize_t n_pending;

static void parts_clear(Parts *p) {  /* drops the references (after the fields are replaced) */
    Py_CLEAR(p->metrics);
    Py_CLEAR(p->acquire);
    Py_CLEAR(p->release);
    for (int k = 0; k < N_INSTRUMENTS; k++) Py_CLEAR(p->points[k]);
}

static int instrument_parts(PyObject *metrics, PyObject *name, Parts *p, int k) {
    PyObject *instrument = PyObject_GetAttr(metrics, name), *bounds = NULL;
    int rc = -1;
    if (!instrument || !(p->points[k] = PyObject_GetAttr(instrument, a_points))
        || !(bounds = PyObject_GetAttr(instrument, a_bounds)))
        goto done;
    if (!PyDict_CheckExact(p->points[k]) || !PyTuple_Check(bounds) || PyTuple_GET_SIZE(bounds) > MAX_BOUNDS) {
        PyErr_SetString(PyExc_TypeError, "histogram points of an unexpected shape");
        goto done;
    }
    p->n_bounds[k] = PyTuple_GET_SIZE(bounds);
    for (Py_ssize_t j = 0; j < p->n_bounds[k]; j++) {
        double b = PyFloat_AsDouble(PyTuple_GET_ITEM(bounds, j));
        if (b == -1.0 && PyErr_Occurred()) goto done;
        p->bounds[k][j] = b;
    }
    rc = 0;
done:
    Py_XDECREF(instrument);
    Py_XDECREF(bounds);
    return rc;
}

/* One key's values in a drain: its point (strong) and what they add to it. */
#define MAX_GROUPS 16
typedef struct {
    int k;
    PyObject *phase, *status, *point;  /* phase, status borrowed from the entries; point strong */
    long long n, counts[MAX_BOUNDS + 1];
    double sum, min, max;
    Py_ssize_t latest[MAX_BOUNDS + 1];  /* per bucket, the entry of its exemplar, or -1 */
} Group;

static PyObject *attributes_of(int k, PyObject *phase, PyObject *status) {
    return k == I_PHASE ? PyTuple_Pack(4, k_phase, phase, f_status_attr, status) : PyTuple_Pack(2, k_status, status);
}

static PyObject *key_of(Pending *e) {  /* the points' key: (phase, status), or the status */
    return e->k == I_PHASE ? PyTuple_Pack(2, e->phase, e->status) : Py_NewRef(e->status);
}

/* The point of entry e's key, made as _histogram makes it where there is none: a new reference. */
static PyObject *point_of(Parts *p, Pending *e) {
    PyObject *key = key_of(e), *points = p->points[e->k], *point = NULL;
    if (!key) return NULL;
    point = Py_XNewRef(PyDict_GetItemWithError(points, key));
    if (!point && !PyErr_Occurred()) {
        Py_ssize_t n = p->n_bounds[e->k] + 1;
        PyObject *attributes = attributes_of(e->k, e->phase, e->status), *now = PyLong_FromLongLong(e->now);
        PyObject *counts = PyList_New(n), *by_bucket = PyDict_New(), *zero = PyFloat_FromDouble(0.0);
        PyObject *value = PyFloat_FromDouble(e->x);
        if (counts) for (Py_ssize_t j = 0; j < n; j++) PyList_SET_ITEM(counts, j, Py_NewRef(zero_int));
        PyObject *fields[9] = {attributes, now, zero_int, zero, value, value, counts, by_bucket, zero};
        point = attributes && now && counts && by_bucket && zero && value ? list_of(9, fields) : NULL;
        if (point && PyDict_SetItem(points, key, point) < 0) Py_CLEAR(point);
        PyObject *made[6] = {attributes, now, counts, by_bucket, zero, value};
        for (int j = 0; j < 6; j++) Py_XDECREF(made[j]);
    }
    Py_DECREF(key);
    if (point && (!PyList_CheckExact(point) || PyList_GET_SIZE(point) != 9 || !PyFloat_CheckExact(PyList_GET_ITEM(point, 3))
                  || !PyList_CheckExact(PyList_GET_ITEM(point, 6))
                  || PyList_GET_SIZE(PyList_GET_ITEM(point, 6)) != p->n_bounds[e->k] + 1)) {
        Py_CLEAR(point);
        PyErr_SetString(PyExc_TypeError, "a histogram point of an unexpected shape");
    }
    return point;
}

/* _add(points, status, attributes, n) for a group of session values; 0 or -1. */
static int add_sessions(Parts *p, Group *g, Pending *first) {
    PyObject *points = p->points[I_SESSIONS], *point = PyDict_GetItemWithError(points, g->status);
    if (point) {
        if (!PyList_CheckExact(point) || PyList_GET_SIZE(point) != 3) {
            PyErr_SetString(PyExc_TypeError, "a counter point of an unexpected shape");
            return -1;
        }
        return bump_by(point, 2, g->n);
    }
    if (PyErr_Occurred()) return -1;
    PyObject *attributes = attributes_of(I_SESSIONS, NULL, g->status), *now = PyLong_FromLongLong(first->now);
    PyObject *count = PyLong_FromLongLong(g->n), *fields[3] = {attributes, now, count};
    PyObject *made = attributes && now && count ? list_of(3, fields) : NULL;
    int r = made ? PyDict_SetItem(points, g->status, made) : -1;
    Py_XDECREF(attributes);
    Py_XDECREF(now);
    Py_XDECREF(count);
    Py_XDECREF(made);
    return r;
}

/* What a group's values add to its point, as _histogram adds them one by one. */
static int group_write(Parts *p, Group *g, Pending *entries) {
    PyObject *point = g->point, *counts = PyList_GET_ITEM(point, 6), *x = NULL;
    int r = bump_by(point, 2, g->n);
    if (r == 0) {
        x = PyFloat_FromDouble(g->sum);
        r = x ? PyList_SetItem(point, 3, x) : -1;  /* steals it */
    }
    double ends[2] = {g->min, g->max};
    int ops[2] = {Py_LT, Py_GT};
    for (int j = 0; j < 2 && r == 0; j++) {
        PyObject *v = PyFloat_FromDouble(ends[j]);
        int beyond = v ? PyObject_RichCompareBool(v, PyList_GET_ITEM(point, 4 + j), ops[j]) : -1;
        r = beyond < 0 ? -1 : beyond ? PyList_SetItem(point, 4 + j, Py_NewRef(v)) : 0;
        Py_XDECREF(v);
    }
    for (Py_ssize_t b = 0; b <= p->n_bounds[g->k] && r == 0; b++) {
        if (g->counts[b]) r = bump_by(counts, b, g->counts[b]);
        if (r == 0 && g->latest[b] >= 0) {
            Pending *e = &entries[g->latest[b]];
            PyObject *value = PyFloat_FromDouble(e->x), *at = PyLong_FromLongLong(e->now);
            PyObject *bucket = PyLong_FromSsize_t(b), *by_bucket = PyList_GET_ITEM(point, 7);
            PyObject *exemplar = value && at ? PyTuple_Pack(4, value, at, e->span_id, e->trace_id) : NULL;
            r = !bucket || !exemplar ? -1
                : PyDict_CheckExact(by_bucket) ? PyDict_SetItem(by_bucket, bucket, exemplar)
                : PyObject_SetItem(by_bucket, bucket, exemplar);
            Py_XDECREF(value);
            Py_XDECREF(at);
            Py_XDECREF(bucket);
            Py_XDECREF(exemplar);
        }
    }
    return r;
}

static int groups_write(Parts *p, Group *groups, int n, Pending *entries, Pending **firsts) {
    int r = 0;
    for (int j = 0; j < n; j++) {
        if (r == 0) r = group_write(p, &groups[j], entries);
        if (r == 0 && groups[j].k == I_SESSION) r = add_sessions(p, &groups[j], firsts[j]);
        Py_CLEAR(groups[j].point);
    }
    return r;
}

static int same_key(Group *g, Pending *e) {
    if (g->k != e->k) return 0;
    int same = g->status == e->status || PyUnicode_Compare(g->status, e->status) == 0;
    if (same && e->k == I_PHASE && g->phase != e->phase)
        same = PyUnicode_Check(g->phase) && PyUnicode_Check(e->phase) ? PyUnicode_Compare(g->phase, e->phase) == 0
               : PyObject_RichCompareBool(g->phase, e->phase, Py_EQ);
    return same;
}

/* Adds the values waiting to the points of p (the caller holds its lock). 0, or -1 on error
 * (the values are dropped either way). */
static int drain(Parts *p) {
    Py_ssize_t n = n_pending;
    if (!n) return 0;
    /* Taken out first: nothing run below can add to them unseen. */
    Pending *entries = PyMem_Malloc(n * sizeof(Pending));
    if (!entries) { PyErr_NoMemory(); return -1; }
    memcpy(entries, pending, n * sizeof(Pending));
    n_pending = 0;
    Group groups[MAX_GROUPS];
    Pending *firsts[MAX_GROUPS];
    int n_groups = 0, r = 0;
    for (Py_ssize_t i = 0; i < n && r == 0; i++) {
        Pending *e = &entries[i];
        int j = 0;
        while (j < n_groups && !same_key(&groups[j], e)) j++;
        if (PyErr_Occurred()) { r = -1; break; }
        if (j == n_groups) {
            if (n_groups == MAX_GROUPS) {  /* each key's values so far written, in order */
                if ((r = groups_write(p, groups, n_groups, entries, firsts)) < 0) break;
                n_groups = j = 0;
            }
            Group *g = &groups[j];
            memset(g, 0, sizeof(*g));
            g->k = e->k;
            g->phase = e->phase;
            g->status = e->status;
            for (Py_ssize_t b = 0; b <= MAX_BOUNDS; b++) g->latest[b] = -1;
            if (!(g->point = point_of(p, e))) { r = -1; break; }
            g->sum = PyFloat_AS_DOUBLE(PyList_GET_ITEM(g->point, 3));
            g->min = g->max = e->x;
            firsts[j] = e;
            n_groups++;
        }
        Group *g = &groups[j];
        g->n++;
        g->sum += e->x;
        if (e->x < g->min) g->min = e->x;
        if (e->x > g->max) g->max = e->x;
        g->counts[e->bucket]++;
        if (e->span_id) g->latest[e->bucket] = i;
    }
    if (r == 0) r = groups_write(p, groups, n_groups, entries, firsts);
    else for (int j = 0; j < n_groups; j++) Py_CLEAR(groups[j].point);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(entries[i].phase);
        Py_DECREF(entries[i].status);
        Py_XDECREF(entries[i].trace_id);
        Py_XDECREF(entries[i].span_id);
    }
    PyMem_Free(entries);
    return r;
}

/* what(arg) between acquire() and release() (a lock's bound methods), released whatever
 * happened: its result, or -1 where the lock failed (release's error kept over what's). */
static int under_lock(PyObject *acquire, PyObject *release, int (*what)(void *), void *arg) {
    PyObject *got = PyObject_CallNoArgs(acquire);
    if (!got) return -1;
    Py_DECREF(got);
    int r = what(arg);
    return call_keeping_error(release, NULL) < 0 ? -1 : r;
}

static int drain_parts(void *p) { return drain((Parts *)p); }

/* drain(p) under the metrics' lock. */
static int drain_locked(Parts *p) {
    /* held: p may be refreshed by another thread while this one waits for the lock */
    PyObject *acquire = Py_NewRef(p->acquire), *release = Py_NewRef(p->release);
    int r = under_lock(acquire, release, drain_parts, p);
    Py_DECREF(acquire);
    Py_DECREF(release);
    return r;
}

static Parts *parts_of(PyObject *metrics) {
    if (parts.metrics == metrics) return &parts;
    /* The values of the metrics cached before go to its points first. */
    if (parts.metrics && drain_locked(&parts) < 0) return NULL;
    Parts fresh;
    memset(&fresh, 0, sizeof(fresh));
    PyObject *lock = PyObject_GetAttr(metrics, a_m_lock), *mode = PyObject_GetAttr(metrics, a_m_exemplars);
    int ok = lock && mode && (fresh.acquire = PyObject_GetAttr(lock, s_acquire))
             && (fresh.release = PyObject_GetAttr(lock, s_release))
             && instrument_parts(metrics, a_m_phase, &fresh, I_PHASE) == 0
             && instrument_parts(metrics, a_m_session, &fresh, I_SESSION) == 0
             && instrument_parts(metrics, a_m_sessions, &fresh, I_SESSIONS) == 0;
    if (ok) {
        fresh.exemplars = PyLong_AsLong(mode);
        ok = !(fresh.exemplars == -1 && PyErr_Occurred());
    }
    Py_XDECREF(lock);
    Py_XDECREF(mode);
    if (!ok) {
        parts_clear(&fresh);
        return NULL;
    }
    fresh.metrics = Py_NewRef(metrics);
    Parts old = parts;  /* released after the swap: a finalizer may run Python */
    parts = fresh;
    parts_clear(&old);
    return &parts;
}

/* drain_metrics(metrics): the values this file holds for `metrics` added to its points; the
 * caller holds its lock. */
static PyObject *drain_metrics(PyObject *self, PyObject *metrics) {
    if (parts.metrics != metrics || drain(&parts) == 0) Py_RETURN_NONE;
    return NULL;
}

/* One value for instrument k (I_PHASE or I_SESSION) of `metrics`, kept for its points; 0 or -1. */
static int record_value(PyObject *metrics, int k, PyObject *phase, PyObject *status, double x, PyObject *trace_id,
                        PyObject *span_id, PyObject *flags) {
    Parts *p = parts_of(metrics);
    if (!p) return -1;
    if (n_pending == BUFFERED && drain_locked(p) < 0) return -1;
    if (parts.metrics != metrics) return record_value(metrics, k, phase, status, x, trace_id, span_id, flags);
    Py_ssize_t lo = 0, hi = p->n_bounds[k];
    while (lo < hi) {  /* bisect_left(bounds, value) */
        Py_ssize_t mid = (lo + hi) / 2;
        if (p->bounds[k][mid] < x) lo = mid + 1;
        else hi = mid;
    }
    int has_span = PyObject_IsTrue(span_id);
    long sampled = PyLong_AsLong(flags) & 1;
    if (has_span < 0 || (sampled == -1 && PyErr_Occurred())) return -1;
    int exemplar = has_span && (p->exemplars == 2 || (p->exemplars && sampled));
    Pending *e = &pending[n_pending++];
    e->k = k;
    e->phase = Py_XNewRef(phase);
    e->status = Py_NewRef(status);
    e->trace_id = exemplar ? Py_NewRef(trace_id) : NULL;
    e->span_id = exemplar ? Py_NewRef(span_id) : NULL;
    e->x = x;
    e->now = wall_ns();
    e->bucket = lo;
    return 0;
}

typedef struct { PyObject *seconds, *phase, *status, *trace_id, *span_id, *flags; } Values;

/* A finalized session's metrics: _session_metrics, with the aggregated points written here. */
static int session_metrics(PyObject *sp, PyObject *metrics, Values *v, PyObject *reason) {
    if (Py_TYPE(metrics) != t_aggregated) {
        PyObject *argv[7] = {sp, v->seconds, v->status, reason, v->trace_id, v->span_id, v->flags};
        PyObject *got = PyObject_VectorcallMethod(s_session_metrics, argv, 7 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_XDECREF(got);
        return got ? 0 : -1;
    }
    int r = record_value(metrics, I_SESSION, NULL, v->status, PyFloat_AS_DOUBLE(v->seconds), v->trace_id,
                         v->span_id, v->flags);
    if (r == 0 && PyUnicode_CheckExact(reason)) {
        PyObject *lower = PyObject_CallMethodNoArgs(reason, s_lower);
        int stale = lower ? PySequence_Contains(lower, stale_mark) : -1;
        Py_XDECREF(lower);
        if (stale > 0) {
            PyObject *got = PyObject_CallMethodOneArg(metrics, s_stale, v->status);
            Py_XDECREF(got);
            if (!got) stale = -1;
        }
        if (stale < 0) r = -1;
    }
    if (r < 0) {  /* as _session_metrics reports it */
        PyObject *got = report_raised(sp, s_metrics_failed, NULL);
        Py_XDECREF(got);
        return got ? 0 : -1;
    }
    return 0;
}

/* The processor's attributes read here, fetched once per processor: its __init__ sets them and
 * nothing rebinds them, so a span's step reads none of them again (about 190 instructions each,
 * eleven a session). The entry holds the processor, so its address is not reused while cached. */
#define N_OWN 8
static PyObject **const own_names[N_OWN] = {&a_phases, &a_versions, &a_statuses, &a_max_pending,
                                            &a_metrics, &a_rank, &a_role, &a_records};
static PyObject *own_sp, *own_values[N_OWN];

static PyObject *own_attr(PyObject *sp, PyObject *name) {  /* getattr(sp, name), a new reference */
    if (sp != own_sp) {
        PyObject *old = own_sp, *values[N_OWN];
        memcpy(values, own_values, sizeof(values));
        memset(own_values, 0, sizeof(own_values));
        own_sp = Py_NewRef(sp);
        for (int k = 0; k < N_OWN; k++) Py_XDECREF(values[k]);  /* after the swap: they may run code */
        Py_XDECREF(old);
    }
    for (int k = 0; k < N_OWN; k++) {
        if (*own_names[k] != name) continue;
        if (!own_values[k] && !(own_values[k] = PyObject_GetAttr(sp, name))) return NULL;
        return Py_NewRef(own_values[k]);
    }
    return PyObject_GetAttr(sp, name);
}

/* 1 handled, 0 left to Python (nothing changed), -1 error. */
/* A phase span as on_phase reads it: its session, its phase's name, its times, whether it
 * was interrupted (session_id and phase borrowed). */
typedef struct {
    PyObject *session_id, *phase;
    long long start, end;
    int interrupted;
} PhaseIn;

/* 1: a phase span this file takes (p filled); 0: the Python step's (policy versions, a phase
 * name or times it would convert); -1: error. */
static int phase_in(PyObject *rec, PyObject *attrs, PhaseIn *p) {
    int has = PyDict_Contains(attrs, k_version);
    if (has) return has < 0 ? -1 : 0;
    p->session_id = get(attrs, k_session_id);
    p->phase = PyDict_GetItemWithError(attrs, k_phase);
    if (!p->session_id || (!p->phase && PyErr_Occurred())) return -1;
    if (!p->phase) p->phase = PyTuple_GET_ITEM(rec, i_name);
    if (!plain(p->phase)) return 0;
    if (!as_int64(PyTuple_GET_ITEM(rec, i_start), &p->start) || !as_int64(PyTuple_GET_ITEM(rec, i_end), &p->end))
        return 0;
    PyObject *flag = get(attrs, k_interrupted);
    if (!flag) return -1;
    p->interrupted = PyObject_IsTrue(flag);
    return p->interrupted < 0 ? -1 : 1;
}

/* The phase's instance, (start, end or None when interrupted), added under its name to a
 * session's phases dict. 0, or -1 on error. */
static int add_instance(PyObject *phases, PyObject *rec, PhaseIn *p) {
    if (!PyDict_CheckExact(phases)) {
        PyErr_SetString(PyExc_TypeError, "a session's phases must be a dict");
        return -1;
    }
    PyObject *instances = PyDict_GetItemWithError(phases, p->phase);
    if (!instances) {
        if (PyErr_Occurred() || !(instances = PyList_New(0))) return -1;
        int r = PyDict_SetItem(phases, p->phase, instances);
        Py_DECREF(instances);
        if (r < 0) return -1;
    }
    PyObject *end = p->interrupted ? Py_None : PyTuple_GET_ITEM(rec, i_end);
    PyObject *entry = PyTuple_Pack(2, PyTuple_GET_ITEM(rec, i_start), end);
    int r = entry && PyList_Check(instances) ? PyList_Append(instances, entry) : -1;
    Py_XDECREF(entry);
    if (r < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a phase's instances must be a list");
    return r;
}

/* The phase's duration metric (metrics not None), as _on_phase records it. 0, or -1 on error. */
static int phase_metric(PyObject *metrics, PyObject *rec, PhaseIn *p) {
    long long code;
    int error = as_int64(PyTuple_GET_ITEM(rec, i_status), &code) && code == error_code;
    PyObject *status = p->interrupted ? s_interrupted : (error ? s_error : s_ok);
    PyObject *trace_id = PyTuple_GET_ITEM(rec, i_trace), *span_id = PyTuple_GET_ITEM(rec, i_span);
    PyObject *flags = PyTuple_GET_ITEM(rec, i_flags);
    if (Py_TYPE(metrics) == t_aggregated)
        return record_value(metrics, I_PHASE, p->phase, status, (double)(p->end - p->start) / 1e9, trace_id, span_id,
                            flags);
    PyObject *secs = seconds(p->end - p->start);
    if (!secs) return -1;
    PyObject *argv[7] = {metrics, secs, p->phase, status, trace_id, span_id, flags};
    PyObject *got = PyObject_VectorcallMethod(s_phase, argv, 7 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(got);
    Py_DECREF(secs);
    return got ? 0 : -1;
}

/* 1 handled, 0 left to Python (nothing changed), -1 error. */
static int on_phase(PyObject *sp, PyObject *rec, PyObject *attrs) {
    PhaseIn p;
    int ready = phase_in(rec, attrs, &p);
    if (ready <= 0) return ready;
    PyObject *phases = own_attr(sp, a_phases), *inner = NULL, *metrics = NULL;
    int rc = -1;
    if (!phases) return -1;
    if (!PyDict_Check(phases)) { rc = 0; goto done; }
    inner = Py_XNewRef(PyDict_GetItemWithError(phases, p.session_id));
    if (!inner) {
        if (PyErr_Occurred()) goto done;
        PyObject *bound = own_attr(sp, a_max_pending);
        if (!bound) goto done;
        Py_ssize_t max_pending = PyLong_AsSsize_t(bound);
        Py_DECREF(bound);
        if (max_pending == -1 && PyErr_Occurred()) goto done;
        if (PyDict_GET_SIZE(phases) >= max_pending) { rc = 0; goto done; }  /* an eviction: Python's */
        if (!(inner = PyDict_New()) || PyObject_SetItem(phases, p.session_id, inner) < 0) goto done;
    }
    if (add_instance(inner, rec, &p) < 0 || !(metrics = own_attr(sp, a_metrics))) goto done;
    if (metrics != Py_None && phase_metric(metrics, rec, &p) < 0) goto done;
    rc = 1;
done:
    Py_XDECREF(phases);
    Py_XDECREF(inner);
    Py_XDECREF(metrics);
    return rc;
}

static PyObject *top_keys;  /* the record's own keys, which no phase field may take */
/* Whether an attribute key starts with the counters' prefix (plen: its length): compared as
 * bytes where both are ASCII, as a session's keys are (PyUnicode_Tailmatch per key was a
 * tenth of the session step's own work). */
static int is_counter(PyObject *key, Py_ssize_t plen) {
    if (!PyUnicode_Check(key)) return 0;
    if (PyUnicode_IS_ASCII(key) && PyUnicode_IS_ASCII(counter_prefix))
        return PyUnicode_GET_LENGTH(key) >= plen
               && memcmp(PyUnicode_1BYTE_DATA(key), PyUnicode_1BYTE_DATA(counter_prefix), (size_t)plen) == 0;
    return PyUnicode_Tailmatch(key, counter_prefix, 0, plen, -1) == 1;
}

static int put_key(Buf *b, PyObject *name);  /* below */

/* (name_s, prefix name_s, prefix name_count, whether name_s is one of the record's own keys,
 * '"name_s":' as the record's line writes it or None where it cannot) for a phase name (text),
 * made once per name: a session's record asks for each of its phases'. */
static PyObject *keys_of(PyObject *name) {
    PyObject *found = PyDict_GetItemWithError(phase_keys, name);
    if (found) return Py_NewRef(found);
    if (PyErr_Occurred()) return NULL;
    PyObject *a = PyUnicode_FromFormat("%U_s", name);
    PyObject *b = PyUnicode_FromFormat("%U%U_s", session_prefix, name);
    PyObject *c = PyUnicode_FromFormat("%U%U_count", session_prefix, name);
    int taken = a ? PySet_Contains(top_keys, a) : -1;
    PyObject *frag = NULL;
    if (taken >= 0) {
        Buf text;
        buf_init(&text);
        int r = put_key(&text, a);
        frag = r == 0 ? PyBytes_FromStringAndSize(text.p, text.n) : r == SKIP ? Py_NewRef(Py_None) : NULL;
        buf_free(&text);
    }
    PyObject *out = b && c && frag ? PyTuple_Pack(5, a, b, c, taken ? Py_True : Py_False, frag) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(c);
    Py_XDECREF(frag);
    if (out && PyDict_GET_SIZE(phase_keys) < MAX_PHASE_KEYS && PyDict_SetItem(phase_keys, name, out) < 0) Py_CLEAR(out);
    return out;
}

/* Whether name is one of the built-in phases (their names are the same objects nearly always). */
static int builtin_phase(PyObject *name) {
    Py_ssize_t n = PyTuple_GET_SIZE(builtin_phases);
    for (Py_ssize_t k = 0; k < n; k++)
        if (PyTuple_GET_ITEM(builtin_phases, k) == name) return 1;
    return PySequence_Contains(builtin_phases, name);
}

static int set(PyObject *d, PyObject *key, PyObject *value) {  /* d[key] = value, taking value */
    if (!value) return -1;
    int r = PyDict_SetItem(d, key, value);
    Py_DECREF(value);
    return r;
}

/* The summed length of a phase's closed instances (a list of (start, end or None), or NULL for
 * none) into *total; 0 when a time is not an int64. */
static int closed_total(PyObject *instances, long long *total) {
    *total = 0;
    for (Py_ssize_t j = 0; instances && j < PyList_GET_SIZE(instances); j++) {
        PyObject *pair = PyList_GET_ITEM(instances, j);
        long long s, e;
        if (PyTuple_GET_ITEM(pair, 1) == Py_None) continue;
        if (!as_int64(PyTuple_GET_ITEM(pair, 0), &s) || !as_int64(PyTuple_GET_ITEM(pair, 1), &e)) return 0;
        *total += e - s;
    }
    return 1;
}

/* The attributes a session span gains (its total, each phase's time and count), in the order
 * they are set: put into its attributes at the end, as a dict of them would be merged. */
#define MAX_DERIVED (1 + 2 * 64)
typedef struct {
    int n;
    PyObject *items[2 * MAX_DERIVED];  /* key, value: strong */
} Derived;

static void derived_clear(Derived *d) {
    for (int k = 0; k < 2 * d->n; k++) Py_DECREF(d->items[k]);
    d->n = 0;
}

static int derived_set(Derived *d, PyObject *key, PyObject *value) {  /* value: borrowed */
    if (d->n == MAX_DERIVED) {
        PyErr_SetString(PyExc_RuntimeError, "more derived attributes than phases");
        return -1;
    }
    d->items[2 * d->n] = Py_NewRef(key);
    d->items[2 * d->n + 1] = Py_NewRef(value);
    d->n++;
    return 0;
}

/* attrs with d's items set, as dict(attrs, **d) (a new reference): attrs itself where the
 * caller's reference is the only one (the compiled record sink's dict: no one else could see it
 * change); NULL on error. */
static PyObject *with_derived(PyObject *attrs, Derived *d) {
    if (!d->n) return Py_NewRef(attrs);
    PyObject *result = Py_REFCNT(attrs) == 1 ? Py_NewRef(attrs) : PyDict_Copy(attrs);
    for (int k = 0; result && k < d->n; k++)
        if (PyDict_SetItem(result, d->items[2 * k], d->items[2 * k + 1]) < 0) Py_CLEAR(result);
    return result;
}

/* The record's phase fields and the derived attributes, for the session's phases. */
static int phase_fields(PyObject *phases, PyObject *record, Derived *derived) {
    PyObject *names = PyList_New(0), *counts = PyDict_New(), *spans = PyDict_New();
    int rc = -1;
    if (!names || !counts || !spans) goto done;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(builtin_phases); k++)
        if (PyList_Append(names, PyTuple_GET_ITEM(builtin_phases, k)) < 0) goto done;
    Py_ssize_t pos = 0;
    PyObject *name, *instances;
    while (PyDict_Next(phases, &pos, &name, &instances)) {
        int builtin = builtin_phase(name);
        if (builtin < 0 || (!builtin && PyList_Append(names, name) < 0)) goto done;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(names); k++) {
        name = PyList_GET_ITEM(names, k);
        instances = PyDict_GetItemWithError(phases, name);
        if (!instances && PyErr_Occurred()) goto done;
        Py_ssize_t n = instances ? PyList_GET_SIZE(instances) : 0;
        long long total;
        if (!closed_total(instances, &total)) {
            PyErr_SetString(PyExc_TypeError, "phase times must be int64");
            goto done;
        }
        PyObject *names3 = keys_of(name);
        if (!names3) goto done;
        PyObject *secs = seconds(total), *count = PyLong_FromSsize_t(n);
        int r = !secs || !count || PyDict_SetItem(record, PyTuple_GET_ITEM(names3, 0), secs) < 0
                || PyDict_SetItem(counts, name, count) < 0
                || (n && (derived_set(derived, PyTuple_GET_ITEM(names3, 1), secs) < 0
                          || derived_set(derived, PyTuple_GET_ITEM(names3, 2), count) < 0));
        Py_XDECREF(secs);
        Py_XDECREF(count);
        Py_DECREF(names3);
        if (r) goto done;
    }
    pos = 0;
    while (PyDict_Next(phases, &pos, &name, &instances)) {
        Py_ssize_t n = PyList_GET_SIZE(instances);
        PyObject *list = PyList_New(n);
        if (!list || PyDict_SetItem(spans, name, list) < 0) { Py_XDECREF(list); goto done; }
        Py_DECREF(list);
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *pair = PyList_GET_ITEM(instances, j), *one = PyDict_New();
            long long s, e = 0;
            if (!one) goto done;
            PyList_SET_ITEM(list, j, one);
            int open = PyTuple_GET_ITEM(pair, 1) == Py_None;
            if (!as_int64(PyTuple_GET_ITEM(pair, 0), &s) || (!open && !as_int64(PyTuple_GET_ITEM(pair, 1), &e))) {
                PyErr_SetString(PyExc_TypeError, "phase times must be int64");
                goto done;
            }
            if (set(one, f_start_ts, seconds(s)) < 0 || set(one, f_end_ts, open ? Py_NewRef(Py_None) : seconds(e)) < 0)
                goto done;
        }
    }
    if (PyDict_SetItem(record, f_phase_counts, counts) < 0 || PyDict_SetItem(record, f_phases, spans) < 0) goto done;
    rc = 0;
done:
    Py_XDECREF(names);
    Py_XDECREF(counts);
    Py_XDECREF(spans);
    return rc;
}

/* --- the session record, appended (jsonl.JsonlAppender.add without its Python frames) ---------
 * Where the processor's records go to the records file's own appender: the line orjson gives
 * with the appender's options, added to its buffer under its lock, and the buffer written
 * (its flush()) once it holds flush_threshold lines, as add() does. Anything else, and a
 * record orjson refuses (add() makes it JSON-safe), is _write_record's. */
static PyTypeObject *t_appender;
static PyObject *dumps_fn, *line_option, *option_kwnames, *a_lock, *a_buffer, *a_count, *a_threshold,
    *s_flush, *s_record_failed;

/* The record lines of one appender (lines_of) are kept here, in order, and added to its buffer
 * when anything else reads or adds to it (its add and _take call drain_records under its lock),
 * or written once they and what its buffer held reach its flush threshold (its flush(), which
 * takes them first). Per line, its lock and the count's attributes cost about 2,000 instructions. */
static PyObject *lines_of;  /* strong */
static char *lines;
static Py_ssize_t lines_len, lines_cap, lines_count, lines_threshold;
/* The lines its buffer held when the first of these came: nothing is added there without these
 * being added first, so it cannot change while any are here. */
static Py_ssize_t lines_before;

static Py_ssize_t int_attr(PyObject *obj, PyObject *name) {  /* -1 with an error set on failure */
    PyObject *v = PyObject_GetAttr(obj, name);
    Py_ssize_t x = v ? PyLong_AsSsize_t(v) : -1;
    Py_XDECREF(v);
    return x;
}

/* The lines kept here added to lines_of's buffer and count (its lock held, or no other thread
 * able to take it). 0, or -1 on error (they are dropped either way). */
static int lines_drain(void) {
    if (!lines_count) return 0;
    Py_ssize_t n_lines = lines_count, more = lines_len;
    lines_count = lines_len = 0;
    PyObject *buffer = PyObject_GetAttr(lines_of, a_buffer), *count = NULL;
    int r = -1;
    if (!buffer) return -1;
    if (!PyByteArray_CheckExact(buffer)) {
        PyErr_SetString(PyExc_TypeError, "an appender's buffer must be a bytearray");
        goto done;
    }
    Py_ssize_t n = PyByteArray_GET_SIZE(buffer), had = int_attr(lines_of, a_count);
    if (had < 0 || PyByteArray_Resize(buffer, n + more) < 0) goto done;
    memcpy(PyByteArray_AS_STRING(buffer) + n, lines, more);
    if (!(count = PyLong_FromSsize_t(had + n_lines)) || PyObject_SetAttr(lines_of, a_count, count) < 0) goto done;
    r = 0;
done:
    Py_DECREF(buffer);
    Py_XDECREF(count);
    return r;
}

static int drain_lines(void *unused) { return lines_drain(); }

/* lines_drain() under lines_of's lock. */
static int lines_locked_drain(void) {
    PyObject *lock = PyObject_GetAttr(lines_of, a_lock);
    PyObject *acquire = lock ? PyObject_GetAttr(lock, s_acquire) : NULL;
    PyObject *release = acquire ? PyObject_GetAttr(lock, s_release) : NULL;
    int r = release ? under_lock(acquire, release, drain_lines, NULL) : -1;
    Py_XDECREF(lock);
    Py_XDECREF(acquire);
    Py_XDECREF(release);
    return r;
}

/* drain_records(appender): the record lines kept here for `appender` added to its buffer; the
 * caller holds its lock. */
static PyObject *drain_records(PyObject *self, PyObject *appender) {
    if (appender != lines_of || lines_drain() == 0) Py_RETURN_NONE;
    return NULL;
}

/* Appends line to the processor's records appender (records, of t_appender) as add() does.
 * 1: kept, or its failure reported as _write_record reports it; -1: error. */
static int append_line(PyObject *sp, PyObject *records, const char *line, Py_ssize_t n) {
    PyObject *got;
    if (records != lines_of) {
        if (lines_count && lines_locked_drain() < 0) goto failed;  /* the appender before gets its lines */
        Py_ssize_t threshold = int_attr(records, a_threshold);
        if (threshold < 0) goto failed;
        Py_XSETREF(lines_of, Py_NewRef(records));
        lines_threshold = threshold;
    }
    if (!lines_count && (lines_before = int_attr(records, a_count)) < 0) goto failed;
    if (lines_len + n > lines_cap) {
        Py_ssize_t cap = 2 * (lines_len + n) + 4096;
        char *more = PyMem_Realloc(lines, cap);
        if (!more) { PyErr_NoMemory(); goto failed; }
        lines = more;
        lines_cap = cap;
    }
    memcpy(lines + lines_len, line, n);
    lines_len += n;
    lines_count++;
    if (lines_before + lines_count >= lines_threshold) {
        got = PyObject_CallMethodNoArgs(records, s_flush);
        Py_XDECREF(got);
        if (!got) goto failed;
    }
    return 1;
failed:  /* reported as add()'s failure would be */
    got = report_raised(sp, s_record_failed, NULL);
    Py_XDECREF(got);
    return got ? 1 : -1;
}

/* The processor's records appender (a new reference) when it is jsonl.JsonlAppender itself,
 * None (a new reference) when it is anything else (_write_record's), NULL on error. */
static PyObject *appender_of(PyObject *sp) {
    PyObject *records = own_attr(sp, a_records);
    if (records && Py_TYPE(records) != t_appender) Py_SETREF(records, Py_NewRef(Py_None));
    return records;
}

/* 1: written (or its failure reported as _write_record reports it); 0: _write_record's; -1: error. */
static int append_record(PyObject *sp, PyObject *record) {
    PyObject *records = appender_of(sp);
    if (!records) return -1;
    if (records == Py_None) { Py_DECREF(records); return 0; }
    PyObject *argv[2] = {record, line_option};
    PyObject *line = PyObject_Vectorcall(dumps_fn, argv, 1, option_kwnames);
    if (!line) {  /* add() makes the record JSON-safe */
        PyErr_Clear();
        Py_DECREF(records);
        return 0;
    }
    int r = PyBytes_CheckExact(line) ? append_line(sp, records, PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line)) : 0;
    Py_DECREF(line);
    Py_DECREF(records);
    return r;
}

/* Whether a session's phases hold only what this file writes as Python would: text names,
 * lists of (int, int or None). */
static int phases_plain(PyObject *phases) {
    Py_ssize_t pos = 0;
    PyObject *name, *instances;
    while (PyDict_Next(phases, &pos, &name, &instances)) {
        if (!PyUnicode_CheckExact(name) || !plain(name) || !PyList_CheckExact(instances)) return 0;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(instances); j++) {
            PyObject *pair = PyList_GET_ITEM(instances, j);
            long long x;
            if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 || !as_int64(PyTuple_GET_ITEM(pair, 0), &x)
                || (PyTuple_GET_ITEM(pair, 1) != Py_None && !as_int64(PyTuple_GET_ITEM(pair, 1), &x)))
                return 0;
        }
    }
    return 1;
}

/* --- the session record's line, written here --------------------------------------------------
 * The bytes orjson gives (with jsonl.LINE_OPTION) for the record dict the Python step builds
 * (_finalize: the ids, times, phase fields, counters, optional fields, trace ids), without
 * building it. SKIP where that is not certain (a value of another type, a phase whose "<name>_s"
 * is another field's key): the dict is built then. */

typedef struct {
    PyObject *task, *session_id, *rank, *role, *step, *status, *reason, *submit_step, *attrs, *trace_id, *span_id;
    long long start, end;
    int pending;
} RecordIn;

static int put_key(Buf *b, PyObject *name) {  /* "name": */
    int r = put_text(b, name);
    return r ? r : PUTS(b, ":");
}

static int put_seconds(Buf *b, long long ns) {  /* what put_double writes for seconds(ns) */
    int r = put_scaled(b, ns, 9);  /* the ns are at hand: put_double would find them again */
    return r == SKIP ? put_double(b, (double)ns / 1e9) : r;
}

/* "name_s" fields, "phase_counts" and "phases", as phase_fields() puts them in the dict; derived
 * gains what phase_fields() gives it. */
static int put_phase_fields(Buf *b, PyObject *phases, Derived *derived) {
    PyObject *names[64];
    Py_ssize_t n_names = 0, counts[64];
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(builtin_phases) && n_names < 64; k++)
        names[n_names++] = PyTuple_GET_ITEM(builtin_phases, k);
    Py_ssize_t pos = 0;
    PyObject *name, *instances;
    while (PyDict_Next(phases, &pos, &name, &instances)) {
        int builtin = builtin_phase(name);
        if (builtin < 0) return -1;
        if (builtin) continue;
        if (n_names == 64) return SKIP;
        names[n_names++] = name;
    }
    int r;
    for (Py_ssize_t k = 0; k < n_names; k++) {
        instances = PyDict_GetItemWithError(phases, names[k]);
        if (!instances && PyErr_Occurred()) return -1;
        Py_ssize_t n = instances ? PyList_GET_SIZE(instances) : 0;
        long long total;
        if (!closed_total(instances, &total)) return SKIP;
        counts[k] = n;
        PyObject *names3 = keys_of(names[k]), *frag;
        if (!names3) return -1;
        r = PyTuple_GET_ITEM(names3, 3) == Py_True || (frag = PyTuple_GET_ITEM(names3, 4)) == Py_None ? SKIP : 0;
        if (r == 0 && !(r = PUTS(b, ",")) && !(r = put(b, PyBytes_AS_STRING(frag), PyBytes_GET_SIZE(frag))))
            r = put_seconds(b, total);
        if (r == 0 && n) {
            PyObject *secs = seconds(total), *count = PyLong_FromSsize_t(n);
            r = !secs || !count || derived_set(derived, PyTuple_GET_ITEM(names3, 1), secs) < 0
                || derived_set(derived, PyTuple_GET_ITEM(names3, 2), count) < 0 ? -1 : 0;
            Py_XDECREF(secs);
            Py_XDECREF(count);
        }
        Py_DECREF(names3);
        if (r) return r;
    }
    if (PUTS(b, ",\"phase_counts\":{") < 0) return -1;
    for (Py_ssize_t k = 0; k < n_names; k++) {
        char tmp[24], *at = digits64(tmp + sizeof(tmp), (unsigned long long)counts[k]);
        if ((k && PUTS(b, ",") < 0) || (r = put_key(b, names[k])) || put(b, at, tmp + sizeof(tmp) - at) < 0)
            return r ? r : -1;
    }
    if (PUTS(b, "},\"phases\":{") < 0) return -1;
    pos = 0;
    int first = 1;
    while (PyDict_Next(phases, &pos, &name, &instances)) {
        if ((!first && PUTS(b, ",") < 0) || (r = put_key(b, name)) || PUTS(b, "[") < 0) return r ? r : -1;
        first = 0;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(instances); j++) {
            PyObject *pair = PyList_GET_ITEM(instances, j);
            long long s, e;
            if (!as_int64(PyTuple_GET_ITEM(pair, 0), &s)) return SKIP;
            if ((j && PUTS(b, ",") < 0) || PUTS(b, "{\"start_ts\":") < 0) return -1;
            if ((r = put_seconds(b, s)) || PUTS(b, ",\"end_ts\":") < 0) return r ? r : -1;
            PyObject *end = PyTuple_GET_ITEM(pair, 1);
            if (end == Py_None) r = PUTS(b, "null");
            else r = as_int64(end, &e) ? put_seconds(b, e) : SKIP;
            if (r || PUTS(b, "}") < 0) return r ? r : -1;
        }
        if (PUTS(b, "]") < 0) return -1;
    }
    return PUTS(b, "}");
}

static int record_line(Buf *b, RecordIn *in, PyObject *phases, Derived *derived) {
    int r;
#define FIELD(lit, value) \
    if (PUTS(b, lit) < 0) return -1; \
    if ((r = put_simple(b, (value)))) return r
    FIELD("{\"task_id\":", in->task);
    FIELD(",\"session_id\":", in->session_id);
    FIELD(",\"rank\":", in->rank);
    FIELD(",\"role\":", in->role);
    FIELD(",\"step\":", in->step);
    FIELD(",\"status\":", in->status);
    FIELD(",\"reason\":", in->reason);
    if (PUTS(b, ",\"submit_ts\":") < 0 || (r = put_seconds(b, in->start))) return r ? r : -1;
    if (in->pending) {
        if (PUTS(b, ",\"finalized_ts\":null,\"total_s\":null") < 0) return -1;
    } else {
        if (PUTS(b, ",\"finalized_ts\":") < 0 || (r = put_seconds(b, in->end))) return r ? r : -1;
        if (PUTS(b, ",\"total_s\":") < 0 || (r = put_seconds(b, in->end - in->start))) return r ? r : -1;
    }
    if (in->submit_step != Py_None) { FIELD(",\"submit_step\":", in->submit_step); }
    if ((r = put_phase_fields(b, phases, derived))) return r;
    if (PUTS(b, ",\"counters\":{") < 0) return -1;
    Py_ssize_t plen = PyUnicode_GET_LENGTH(counter_prefix), pos = 0;
    PyObject *key, *value;
    int first = 1;
    while (PyDict_Next(in->attrs, &pos, &key, &value)) {
        if (!is_counter(key, plen)) continue;
        PyObject *name = PyUnicode_Substring(key, plen, PyUnicode_GET_LENGTH(key));
        if (!name) return -1;
        r = first ? 0 : PUTS(b, ",");
        if (!r) r = put_key(b, name);
        Py_DECREF(name);
        if (r || (r = put_simple(b, value))) return r;
        first = 0;
    }
    if (PUTS(b, "}") < 0) return -1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(optional_fields); k++) {
        PyObject *pair = PyTuple_GET_ITEM(optional_fields, k), *v = get(in->attrs, PyTuple_GET_ITEM(pair, 0));
        if (!v) return -1;
        if (v == Py_None) continue;
        if (PUTS(b, ",") < 0 || (r = put_key(b, PyTuple_GET_ITEM(pair, 1))) || (r = put_simple(b, v))) return r ? r : -1;
    }
#undef FIELD
    PyObject *trace = trace_text(in->trace_id, hex32), *span = trace ? hex_id(in->span_id, 8, hex16) : NULL;
    r = span ? PUTS(b, ",\"trace_id\":") : -1;
    if (!r) r = put_text(b, trace);
    if (!r) r = PUTS(b, ",\"span_id\":");
    if (!r) r = put_text(b, span);
    if (!r) r = PUTS(b, "}\n");
    Py_XDECREF(trace);
    Py_XDECREF(span);
    return r;
}

/* The record as a dict, as the Python step builds it (phase_fields gives derived its fields),
 * written by orjson into the appender or handed to _write_record. 0: written, or its failure
 * reported as _write_record reports it; -1: error. */
static int write_record_dict(PyObject *sp, RecordIn *in, PyObject *phases, Derived *derived, PyObject *total) {
    PyObject *record = PyDict_New(), *counters = PyDict_New();
    int rc = -1;
    if (!record || !counters) goto done;
    if (PyDict_SetItem(record, f_task_id, in->task) < 0 || PyDict_SetItem(record, f_session_id, in->session_id) < 0
        || PyDict_SetItem(record, f_rank, in->rank) < 0 || PyDict_SetItem(record, f_role, in->role) < 0
        || PyDict_SetItem(record, f_step, in->step) < 0 || PyDict_SetItem(record, f_status, in->status) < 0
        || PyDict_SetItem(record, f_reason, in->reason) < 0 || set(record, f_submit_ts, seconds(in->start)) < 0
        || set(record, f_finalized_ts, in->pending ? Py_NewRef(Py_None) : seconds(in->end)) < 0
        || PyDict_SetItem(record, f_total_s, total) < 0
        || (in->submit_step != Py_None && PyDict_SetItem(record, f_submit_step, in->submit_step) < 0)
        || phase_fields(phases, record, derived) < 0)
        goto done;
    Py_ssize_t plen = PyUnicode_GET_LENGTH(counter_prefix), pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(in->attrs, &pos, &key, &value)) {
        if (!is_counter(key, plen)) continue;
        PyObject *name = PyUnicode_Substring(key, plen, PyUnicode_GET_LENGTH(key));
        int r = name ? set(counters, name, Py_NewRef(value)) : -1;
        Py_XDECREF(name);
        if (r < 0) goto done;
    }
    if (PyDict_SetItem(record, f_counters, counters) < 0) goto done;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(optional_fields); k++) {
        PyObject *pair = PyTuple_GET_ITEM(optional_fields, k), *v = get(in->attrs, PyTuple_GET_ITEM(pair, 0));
        if (!v || (v != Py_None && PyDict_SetItem(record, PyTuple_GET_ITEM(pair, 1), v) < 0)) goto done;
    }
    if (set(record, f_trace_id, trace_text(in->trace_id, hex32)) < 0
        || set(record, f_span_id, hex_id(in->span_id, 8, hex16)) < 0)
        goto done;
    int appended = append_record(sp, record);
    if (appended == 0) {
        PyObject *argv[2] = {sp, record};
        PyObject *got = PyObject_VectorcallMethod(s_write_record, argv, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_XDECREF(got);
        appended = got ? 1 : -1;
    }
    rc = appended < 0 ? -1 : 0;
done:
    Py_XDECREF(record);
    Py_XDECREF(counters);
    return rc;
}

/* The session's record written: its line here where record_line can (into the appender), the
 * dict's way otherwise. derived holds total_s and gains the phase fields. 0 or -1 (error). */
static int write_record(PyObject *sp, RecordIn *in, PyObject *phases, Derived *derived, PyObject *total) {
    PyObject *records = appender_of(sp);
    if (!records) return -1;
    int r = SKIP;
    if (records != Py_None) {
        Buf b;
        buf_init(&b);
        r = record_line(&b, in, phases, derived);
        if (r == 0) r = append_line(sp, records, b.p, b.n) < 0 ? -1 : 0;
        buf_free(&b);
    }
    Py_DECREF(records);
    if (r != SKIP) return r;
    /* the dict's way, with derived as it was before record_line */
    derived_clear(derived);
    if (!in->pending && derived_set(derived, k_total_s, total) < 0) return -1;
    return write_record_dict(sp, in, phases, derived, total);
}

/* The attributes of the session span (a new dict with what it gained), NULL and no error when
 * it is left to Python. */
/* A session span's inputs, as on_session reads them before it changes anything. */
typedef struct {
    PyObject *session_id, *reason, *task, *step, *submit_step, *status;  /* borrowed from attrs */
    PyObject *phases_map, *versions, *statuses, *rank, *role;  /* new references */
    long long start, end;
} SessionIn;

static void session_in_clear(SessionIn *s) {
    Py_CLEAR(s->phases_map);
    Py_CLEAR(s->versions);
    Py_CLEAR(s->statuses);
    Py_CLEAR(s->rank);
    Py_CLEAR(s->role);
}

/* on_session's checks, changing nothing: 1 this file's (s filled), 0 the Python step's, -1 error. */
static int session_ready(PyObject *sp, PyObject *rec, PyObject *attrs, SessionIn *s) {
    memset(s, 0, sizeof(*s));
    int has = PyDict_Contains(attrs, k_version);
    if (has) return has < 0 ? -1 : 0;
    s->session_id = get(attrs, k_session_id);
    s->reason = get(attrs, k_reason);
    s->task = get(attrs, k_task);
    s->step = get(attrs, k_step);
    s->submit_step = get(attrs, k_submit_step);
    s->status = PyDict_GetItemWithError(attrs, k_status);
    if (!s->session_id || !s->reason || !s->task || !s->step || !s->submit_step || (!s->status && PyErr_Occurred()))
        return -1;
    if (!s->status) s->status = status_pending;
    if (!PyUnicode_CheckExact(s->status) || !plain(s->status) || !plain(s->session_id) || !plain(s->reason)
        || !plain(s->task) || !plain(s->step) || !plain(s->submit_step)
        || !as_int64(PyTuple_GET_ITEM(rec, i_start), &s->start) || !as_int64(PyTuple_GET_ITEM(rec, i_end), &s->end))
        return PyErr_Occurred() ? -1 : 0;
    Py_ssize_t plen = PyUnicode_GET_LENGTH(counter_prefix);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(attrs, &pos, &key, &value)) {
        if (is_counter(key, plen) && (!PyUnicode_CheckExact(key) || !plain(key) || !plain(value)))
            return PyErr_Occurred() ? -1 : 0;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(optional_fields); k++) {
        PyObject *v = get(attrs, PyTuple_GET_ITEM(PyTuple_GET_ITEM(optional_fields, k), 0));
        if (!v) return -1;
        if (!plain(v)) return PyErr_Occurred() ? -1 : 0;
    }
    if (!(s->phases_map = own_attr(sp, a_phases)) || !(s->versions = own_attr(sp, a_versions))
        || !(s->statuses = own_attr(sp, a_statuses)) || !(s->rank = own_attr(sp, a_rank))
        || !(s->role = own_attr(sp, a_role)))
        goto failed;
    if (!PyDict_Check(s->phases_map) || !PyDict_Check(s->versions) || !PyDict_Check(s->statuses)) {
        session_in_clear(s);
        return 0;
    }
    has = PyDict_Contains(s->versions, s->session_id);  /* policy versions: Python's */
    if (has < 0) goto failed;
    if (has) {
        session_in_clear(s);
        return 0;
    }
    return 1;
failed:
    session_in_clear(s);
    return -1;
}

/* What on_session does once the session is this file's, with its phases (a dict this takes
 * over): the status count, the record, the metrics; the attributes the span goes on with. */
static PyObject *session_finish(PyObject *sp, PyObject *rec, PyObject *attrs, SessionIn *s, PyObject *phases) {
    PyObject *result = NULL;
    Derived derived;
    derived.n = 0;
    PyObject *seen = PyDict_GetItemWithError(s->statuses, s->status);
    if (!seen && PyErr_Occurred()) goto done;
    {
        PyObject *next = seen ? PyNumber_Add(seen, one) : Py_NewRef(one);
        if (!next || PyObject_SetItem(s->statuses, s->status, next) < 0) { Py_XDECREF(next); goto done; }
        Py_DECREF(next);
    }
    int pending = PyUnicode_Compare(s->status, status_pending) == 0;
    PyObject *total = pending ? Py_NewRef(Py_None) : seconds(s->end - s->start);
    if (!total) goto done;
    RecordIn in = {s->task, s->session_id, s->rank, s->role, s->step, s->status, s->reason, s->submit_step, attrs,
                   PyTuple_GET_ITEM(rec, i_trace), PyTuple_GET_ITEM(rec, i_span), s->start, s->end, pending};
    int ok = (pending || derived_set(&derived, k_total_s, total) == 0)
             && write_record(sp, &in, phases, &derived, total) == 0;
    if (ok && !pending) {
        PyObject *metrics = own_attr(sp, a_metrics);
        Values v = {total, NULL, s->status, in.trace_id, in.span_id, PyTuple_GET_ITEM(rec, i_flags)};  /* no phase */
        ok = metrics && (metrics == Py_None || session_metrics(sp, metrics, &v, s->reason) == 0);
        Py_XDECREF(metrics);
    }
    Py_DECREF(total);
    /* A new dict, as the Python step returns, or the caller's own (see with_derived). */
    if (ok) result = with_derived(attrs, &derived);
done:
    derived_clear(&derived);
    return result;
}

static PyObject *on_session(PyObject *sp, PyObject *rec, PyObject *attrs) {
    SessionIn s;
    int ready = session_ready(sp, rec, attrs, &s);
    if (ready <= 0) return NULL;
    PyObject *phases = Py_XNewRef(PyDict_GetItemWithError(s.phases_map, s.session_id)), *result = NULL;
    if (!phases && PyErr_Occurred()) goto done;
    if (phases && (!PyDict_CheckExact(phases) || !phases_plain(phases))) goto done;

    /* From here on the session is this file's. */
    if (phases && PyObject_DelItem(s.phases_map, s.session_id) < 0) goto done;
    if (!phases && !(phases = PyDict_New())) goto done;
    result = session_finish(sp, rec, attrs, &s, phases);
done:
    Py_XDECREF(phases);
    session_in_clear(&s);
    return result;
}

/* --- a session with its bundled phases: derive_bundle ---------------------------------------
 * derive_bundle(processor, rec, attrs, phases) -> attributes, or None: what derive() does for
 * each of the session's phases ((record, attributes) pairs, in the order the exporter expands
 * them) and then for the session span, in one step, or None, having changed nothing, where one
 * of those steps would not be this file's, would evict a pending session, or the session has
 * phases kept from spans before it (the expanded records take derive()'s way then). The phases
 * are counted into the session's record straight away rather than kept under its id in
 * between: the same metrics, in the same order, and the same record. */
/* phase_in for a phase of the session session_id whose name is text (the session's record
 * takes no other): 1, or 0 where the step-by-step way must take it, -1 on error. */
static int phase_ready(PyObject *rec, PyObject *attrs, PyObject *session_id, PhaseIn *p) {
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || !PyDict_CheckExact(attrs)) return 0;
    int r = phase_in(rec, attrs, p);
    if (r <= 0) return r;
    if (!PyUnicode_CheckExact(p->phase)) return 0;
    return PyObject_RichCompareBool(p->session_id, session_id, Py_EQ);
}

static PyObject *derive_bundle(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "derive_bundle(processor, rec, attrs, phases)");
        return NULL;
    }
    if (n_fields < 0) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *sp = args[0], *rec = args[1], *attrs = args[2], *pairs = args[3];
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || !PyDict_CheckExact(attrs)
        || !PyTuple_CheckExact(pairs) || PyTuple_GET_SIZE(pairs) > 64)
        Py_RETURN_NONE;
    SessionIn s;
    int ready = session_ready(sp, rec, attrs, &s);
    if (ready < 0) return NULL;
    if (ready == 0) Py_RETURN_NONE;
    PyObject *result = NULL, *phases = NULL, *metrics = NULL, *bound = NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(pairs);
    PhaseIn in[64];
    int r = 1;
    for (Py_ssize_t k = 0; k < n && r == 1; k++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, k);
        r = PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2
            ? phase_ready(PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), s.session_id, &in[k])
            : 0;
    }
    if (r < 0) goto done;
    if (r == 1 && n) {  /* the first phase would keep its session's phases: the map must have room */
        if (!(bound = own_attr(sp, a_max_pending))) goto done;
        Py_ssize_t max_pending = PyLong_AsSsize_t(bound);
        if (max_pending == -1 && PyErr_Occurred()) goto done;
        int kept = PyDict_Contains(s.phases_map, s.session_id);
        if (kept < 0) goto done;
        if (kept || PyDict_GET_SIZE(s.phases_map) >= max_pending) r = 0;
    }
    if (r == 1 && !(metrics = own_attr(sp, a_metrics))) goto done;
    if (r == 1 && metrics != Py_None && Py_TYPE(metrics) != t_aggregated) r = 0;
    if (r == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* From here on the session and its phases are this file's. */
    if (!(phases = PyDict_New())) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *prec = PyTuple_GET_ITEM(PyTuple_GET_ITEM(pairs, k), 0);
        if (add_instance(phases, prec, &in[k]) < 0 || (metrics != Py_None && phase_metric(metrics, prec, &in[k]) < 0))
            goto done;
    }
    result = session_finish(sp, rec, attrs, &s, phases);
done:
    Py_XDECREF(phases);
    Py_XDECREF(metrics);
    Py_XDECREF(bound);
    session_in_clear(&s);
    return result;
}

/* derive(processor, rec, attrs, kind) -> attributes, or None where the Python step must run */
static PyObject *derive(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "derive(processor, rec, attrs, kind)");
        return NULL;
    }
    if (n_fields < 0) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *sp = args[0], *rec = args[1], *attrs = args[2], *kind = args[3];
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != n_fields || !PyDict_CheckExact(attrs)) Py_RETURN_NONE;
    if (is_text(kind, kind_phase)) {
        int r = on_phase(sp, rec, attrs);
        if (r < 0) return NULL;
        return Py_NewRef(r ? attrs : Py_None);
    }
    PyObject *out = on_session(sp, rec, attrs);
    if (!out && PyErr_Occurred()) return NULL;
    return out ? out : Py_NewRef(Py_None);
}

static int take_str(PyObject *config, const char *key, PyObject **slot) {
    if (take(config, key, slot) < 0) return -1;
    if (PyUnicode_CheckExact(*slot)) return 0;
    PyErr_Format(PyExc_TypeError, "configure(): %s must be a str", key);
    return -1;
}

/* configure(dict): the keys, record fields and names derive() reads. */
static PyObject *configure(PyObject *self, PyObject *config) {
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes a dict");
        return NULL;
    }
    Py_ssize_t fields, error;
    if (take_str(config, "SESSION_ID", &k_session_id) || take_str(config, "PHASE", &k_phase)
        || take_str(config, "PHASE_INTERRUPTED", &k_interrupted) || take_str(config, "POLICY_VERSION", &k_version)
        || take_str(config, "SESSION_STATUS", &k_status) || take_str(config, "SESSION_REASON", &k_reason)
        || take_str(config, "TASK_ID", &k_task) || take_str(config, "STEP", &k_step)
        || take_str(config, "SESSION_SUBMIT_STEP", &k_submit_step) || take_str(config, "SESSION_TOTAL_S", &k_total_s)
        || take_str(config, "SESSION_PREFIX", &session_prefix)
        || take_str(config, "SESSION_COUNTER_PREFIX", &counter_prefix)
        || take_str(config, "STATUS_PENDING", &status_pending) || take_str(config, "KIND_PHASE", &kind_phase)
        || take(config, "BUILTIN_PHASES", &builtin_phases) || take(config, "OPTIONAL_FIELDS", &optional_fields)
        || take(config, "AggregatedSessionMetrics", (PyObject **)&t_aggregated)
        || take_str(config, "STALE_REASON_MARK", &stale_mark)
        || take_index(config, "ERROR", &error) || take_index(config, "fields", &fields)
        || take_index(config, "NAME", &i_name) || take_index(config, "TRACE_ID", &i_trace)
        || take_index(config, "SPAN_ID", &i_span) || take_index(config, "START", &i_start)
        || take_index(config, "END", &i_end) || take_index(config, "STATUS", &i_status)
        || take_index(config, "FLAGS", &i_flags) || take(config, "JsonlAppender", (PyObject **)&t_appender)
        || take(config, "dumps", &dumps_fn) || take(config, "LINE_OPTION", &line_option))
        return NULL;
    if (!PyType_Check(t_appender)) {
        PyErr_SetString(PyExc_TypeError, "configure(): JsonlAppender must be a class");
        return NULL;
    }
    if (!PyTuple_CheckExact(builtin_phases) || !PyTuple_CheckExact(optional_fields)) {
        PyErr_SetString(PyExc_TypeError, "configure(): BUILTIN_PHASES and OPTIONAL_FIELDS must be tuples");
        return NULL;
    }
    PyObject *taken = PySet_New(NULL);
    PyObject *own[] = {f_task_id, f_session_id, f_rank, f_role, f_step, f_status, f_reason, f_submit_ts, f_finalized_ts,
                       f_total_s, f_submit_step, f_phase_counts, f_phases, f_counters, f_trace_id, f_span_id};
    for (size_t k = 0; taken && k < sizeof(own) / sizeof(own[0]); k++)
        if (PySet_Add(taken, own[k]) < 0) Py_CLEAR(taken);
    for (Py_ssize_t k = 0; taken && k < PyTuple_GET_SIZE(optional_fields); k++) {
        PyObject *pair = PyTuple_GET_ITEM(optional_fields, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || PySet_Add(taken, PyTuple_GET_ITEM(pair, 1)) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "configure(): OPTIONAL_FIELDS must be pairs");
            Py_CLEAR(taken);
        }
    }
    if (!taken) return NULL;
    Py_XSETREF(top_keys, taken);
    error_code = (long)error;
    n_fields = fields;
    PyDict_Clear(phase_keys);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "Sets the keys, record fields and names derive() reads."},
    {"derive", (PyCFunction)(void (*)(void))derive, METH_FASTCALL,
     "SessionSpanProcessor.on_record for a phase or session span, or None where Python must run it."},
    {"derive_bundle", (PyCFunction)(void (*)(void))derive_bundle, METH_FASTCALL,
     "derive() for a session's expanded phases and then its span, or None where they must take it one by one."},
    {"drain_records", drain_records, METH_O,
     "Adds the record lines kept here for a JsonlAppender to its buffer (the caller holds its lock)."},
    {"drain_metrics", drain_metrics, METH_O,
     "Adds the values kept here for an AggregatedSessionMetrics to its points (the caller holds its lock)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_session_processor", NULL, -1, methods};

#define INTERN(var, text) if (!((var) = PyUnicode_InternFromString(text))) goto failed

PyMODINIT_FUNC PyInit__session_processor(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (!(phase_keys = PyDict_New())) goto failed;
    INTERN(s_ok, "ok");
    INTERN(s_error, "error");
    INTERN(s_interrupted, "interrupted");
    INTERN(s_phase, "phase");
    INTERN(s_write_record, "_write_record");
    INTERN(s_record_failed, "_record_failed");
    INTERN(s_flush, "flush");
    INTERN(a_records, "_records");
    INTERN(a_lock, "_lock");
    INTERN(a_buffer, "_buffer");
    INTERN(a_count, "_count");
    INTERN(a_threshold, "_threshold");
    /* Interned: orjson finds its keyword arguments by the name's identity. */
    PyObject *option_name = PyUnicode_InternFromString("option");
    option_kwnames = option_name ? PyTuple_Pack(1, option_name) : NULL;
    Py_XDECREF(option_name);
    if (!option_kwnames) goto failed;
    INTERN(s_session_metrics, "_session_metrics");
    INTERN(a_phases, "_phases");
    INTERN(a_versions, "_versions");
    INTERN(a_statuses, "statuses");
    INTERN(a_max_pending, "_max_pending");
    INTERN(a_metrics, "_metrics");
    INTERN(a_rank, "_rank");
    INTERN(a_role, "_role");
    INTERN(f_task_id, "task_id");
    INTERN(f_session_id, "session_id");
    INTERN(f_rank, "rank");
    INTERN(f_role, "role");
    INTERN(f_step, "step");
    INTERN(f_status, "status");
    INTERN(f_reason, "reason");
    INTERN(f_submit_ts, "submit_ts");
    INTERN(f_finalized_ts, "finalized_ts");
    INTERN(f_total_s, "total_s");
    INTERN(f_submit_step, "submit_step");
    INTERN(f_phase_counts, "phase_counts");
    INTERN(f_phases, "phases");
    INTERN(f_counters, "counters");
    INTERN(f_trace_id, "trace_id");
    INTERN(f_span_id, "span_id");
    INTERN(f_start_ts, "start_ts");
    INTERN(f_end_ts, "end_ts");
    INTERN(hex32, "032x");
    INTERN(hex16, "016x");
    INTERN(a_m_phase, "_phase");
    INTERN(a_m_session, "_session");
    INTERN(a_m_sessions, "_sessions");
    INTERN(a_m_lock, "_lock");
    INTERN(a_m_exemplars, "_exemplars");
    INTERN(a_bounds, "bounds");
    INTERN(a_points, "points");
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    INTERN(s_stale, "stale");
    INTERN(s_lower, "lower");
    INTERN(s_metrics_failed, "metrics_failed");
    INTERN(f_status_attr, "status");
    if (!(one = PyLong_FromLong(1)) || !(zero_int = PyLong_FromLong(0))) goto failed;
    return m;
failed:
    Py_DECREF(m);
    return NULL;
}
