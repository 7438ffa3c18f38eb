/* The compiled twins of session calls on the training thread (sessions.py, tracking.py): a
 * phase mark for an open session, a session registered for a known task, a task registered
 * (register_task, below), a plain session's record at finalize (session_record, below), a task's
 * plain sessions finalized together (finalize_task_sessions, below) and a task finalized whole,
 * its end included (finalize_task, below). Before the last two, a task's registration and its
 * finalize cost the training thread 3.0 and 3.8 us in Python, as much as its four sessions'
 * registrations and marks together; 1.7 and 1.8 us now.
 *
 * In Python a session's four marks cost about 19,000 instructions (a call with **payload, a
 * dozen attribute and dict lookups, two clock reads, two tuples) and its registration about
 * 9,000 (three calls deep, a SessionState with fourteen slots set one by one): together more
 * than a third of what the training thread paid for a session. Each callable here has its
 * Python function's signature and does the same steps on the same objects:
 *
 *   trace_session_event("mark_<phase>_start", session_id): (phase, time_ns(), get_ident(), None,
 *     STATE.policy_version) appended to the session's open_phases;
 *   trace_session_event("mark_<phase>_end", session_id), the phase opened last: that tuple
 *     popped, and (phase, start, time_ns(), thread, None, None, version) appended to its done;
 *   trace_session_event("mark_finalized", task_id=..., [status=...]): Registry.finalize_task,
 *     then the task's end (Registry._end_task), its records queued as LeanSpan.__exit__ queues;
 *   register_task([task_id]): Registry.register_task for a task whose trace starts empty;
 *   register_session(task_id): Registry.register_session for a registered task that is not
 *     idle, with room for one more pending session, its lock free: the next session id, a
 *     SessionState as its __init__ fills it (ids, clock and thread drawn in the same order),
 *     then, under the registry's lock, the session in `sessions` and in its task's open set.
 *
 * Anything else (a payload, a method not parsed yet, an unknown session, registered phase
 * options, an end that is not the latest phase, the current task looked up in the context, an
 * eviction, a value of an unexpected type) goes, unchanged, to the Python function before
 * anything here has changed: it keeps every other behaviour and its guard. The clock, the ids
 * and the thread ident are read from the Python function's module globals at each call, so a
 * stand-in (the tests' fake clock and ids) reads both paths the same. Slots of STATE,
 * SessionState and TaskState are read through their member descriptors' offsets, found once
 * when a callable is made.
 */
#include "../_cext.h"
#include <time.h>
#include <pythread.h>

enum { EVENT, REGISTER, REGISTER_TASK };
#define N_SESSION_SLOTS 14

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;           /* EVENT, REGISTER or REGISTER_TASK */
    PyObject *slow;     /* the Python function */
    PyObject *state;    /* STATE */
    PyObject *methods;  /* EVENT: method -> (phase, is_start) or (), as the Python path fills it */
    /* The globals the Python steps read their clock, ids and thread ident from, and what those
     * held when this was made (the stdlib's): a stand-in there is called instead. */
    PyObject *globals, *time_ns, *getrandbits, *get_ident;
    PyObject *dict;     /* __doc__, __name__, __wrapped__... */
    /* The last registry seen and the attributes read from it: a registry keeps these objects
     * for its life (it changes what they hold, never the attributes; its lock, which a forked
     * child replaces, is read at each call), so they are looked up once per configuration.
     * Held until the next configuration's first call. */
    PyObject *registry, *sessions, *options, *tasks, *session_ids, *pipeline, *max_pending;
    Py_ssize_t o_sessions_on, o_registry, o_version;  /* STATE's slots */
} Compiled;

/* SessionState's slots, each set by new_session(): a slot added in Python and not here makes
 * configure() refuse the class. */
static const char *const session_slots[N_SESSION_SLOTS] = {
    "session_id", "task_id", "task", "span_id", "start_ns", "thread", "_span", "_ctx",
    "open_phases", "done", "counters", "_pipeline", "version", "extra"};
enum { S_SESSION_ID, S_TASK_ID, S_TASK, S_SPAN_ID, S_START, S_THREAD, S_SPAN, S_CTX, S_OPEN, S_DONE, S_COUNTERS,
       S_PIPELINE, S_VERSION, S_EXTRA };

/* The record's fields, in record.py's order of their constants (record.layout() gives where). */
enum { F_NAME, F_TRACE, F_SPAN, F_PARENT, F_REMOTE, F_FLAGS, F_STATE, F_START, F_END, F_KIND, F_IDS, F_THREAD,
       F_CATEGORY, F_ATTRS, F_ARGS, F_EVENTS, F_LINKS, F_STATUS, F_DESC, F_SCOPE, F_BUNDLE, N_FIELDS };
static const char *const field_names[N_FIELDS] = {
    "NAME", "TRACE_ID", "SPAN_ID", "PARENT_ID", "PARENT_REMOTE", "FLAGS", "TRACE_STATE", "START", "END", "KIND", "IDS",
    "THREAD", "CATEGORY", "ATTRIBUTES", "ARGS", "EVENTS", "LINKS", "STATUS", "STATUS_DESC", "SCOPE", "BUNDLE"};

/* tracking.py's classes, keys and record layout, set by configure() when it is imported: the
 * three paths read these, the callables only what they were made with. */
#define N_CFG_REFS 32
typedef struct {
    union {
        struct {
            PyObject *session_type, *task_type, *span_type, *empty_state, *k_kind, *kind_session, *k_session,
                *k_task, *k_version, *k_status, *k_reason, *name, *k_step, *statuses, *failed, *error_code,
                *keep_latest,
                /* a task's end (end_task): its counts' statuses and attribute keys, what a plain task
                 * span holds, and the module globals the Python steps read their clocks from */
                *accepted, *pending, *final_statuses, *task_statuses, *task_keys, *baggage_key, *kind_internal,
                *status_unset,
                *tracking_globals, *spans_globals,
                /* a task's registration (register_task): what its span and context are made of */
                *context_var, *context_type, *empty_context, *span_key, *kind_task;
        };
        PyObject *refs[N_CFG_REFS];
    };
    Py_ssize_t session[N_SESSION_SLOTS];  /* SessionState's slots, in session_slots' order */
    Py_ssize_t task_span, task_bag, task_open, task_idle, task_id, task_counts, task_requested;  /* TaskState's */
    Py_ssize_t finalized_kept, recent_kept;
    Py_ssize_t trace, parent_span, flags, trace_state;  /* LeanSpan's */
    Py_ssize_t span_name, span_parent, span_remote, span_start, span_end, span_ctx, span_thread, span_kind,
        span_attrs, span_args, span_category, span_events, span_links, span_status, span_desc, span_pipeline,
        span_token, span_sc;
    Py_ssize_t task_ctx;  /* TaskState's */
    Py_ssize_t fields, at[N_FIELDS];  /* the record's length, and each field's index */
} Config;
static Config cfg;

static PyObject *s_session_id, *s_phase_options, *s_sessions, *s_time_ns, *s_getrandbits, *s_get_ident,
    *s_new_span_id, *s_tasks, *s_session_ids, *s_pipeline, *s_max_pending, *s_lock, *s_acquire, *s_release, *s_get,
    *s_span_clock, *s_report, *bits64, *one, *zero_int;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* globals[name]() where it is not `builtin` (the stdlib's); NULL (no error) when it is. */
static PyObject *stand_in(Compiled *self, PyObject *name, PyObject *builtin, PyObject *arg, int *used) {
    PyObject *fn = PyDict_GetItemWithError(self->globals, name);
    *used = fn != builtin;
    if (!*used) return NULL;
    if (!fn) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_NameError, "%U", name);
    return arg ? PyObject_CallOneArg(fn, arg) : PyObject_CallNoArgs(fn);
}

static PyObject *clock_ns(Compiled *self) {  /* time_ns() */
    int used;
    PyObject *v = stand_in(self, s_time_ns, self->time_ns, NULL, &used);
    if (used) return v;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}

static PyObject *thread_ident(Compiled *self) {  /* get_ident() */
    int used;
    PyObject *v = stand_in(self, s_get_ident, self->get_ident, NULL, &used);
    return used ? v : PyLong_FromUnsignedLong(PyThread_get_thread_ident());
}

/* The registry in force, its attributes cached (see Compiled); NULL with no error: none. */
static PyObject *registry_of(Compiled *self) {
    PyObject *registry = SLOT(self->state, self->o_registry);
    if (!registry || registry == Py_None) return NULL;
    if (registry == self->registry) return registry;
    PyObject *names[7] = {s_sessions, s_phase_options, s_tasks, s_session_ids, s_pipeline, s_max_pending, NULL};
    PyObject *got[6] = {NULL};
    for (int k = 0; names[k]; k++)
        if (!(got[k] = PyObject_GetAttr(registry, names[k]))) goto bad;
    /* `sessions` a dict (a subclass taken too), `tasks` a plain dict */
    if (!PyDict_Check(got[0]) || !PyDict_Check(got[1]) || !PyDict_CheckExact(got[2]) || !PyLong_CheckExact(got[5]))
        goto bad;
    Py_XSETREF(self->registry, Py_NewRef(registry));
    PyObject **slots[6] = {&self->sessions, &self->options, &self->tasks, &self->session_ids, &self->pipeline,
                           &self->max_pending};
    for (int k = 0; k < 6; k++) Py_XSETREF(*slots[k], got[k]);
    return registry;
bad:
    for (int k = 0; k < 6; k++) Py_XDECREF(got[k]);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a registry of an unexpected shape");
    return NULL;
}

/* Untracks the new tuple t where nothing in it is a container the collector tracks (text,
 * numbers, None, and dicts or tuples it has untracked): what its young passes do for a tuple of
 * atomic items, except that they keep any tuple holding a dict. Done here, the records queued
 * for the export thread and the phases waiting in their sessions are never traversed: in the
 * session benchmark the collector had taken about a quarter of the training process's CPU, most
 * of it traversing them. A record's dicts (its attributes, its task's baggage) are never changed
 * once it is queued, so no cycle can form through it. */
static void untrack_leaf(PyObject *t) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(t); k++) {
        PyObject *v = PyTuple_GET_ITEM(t, k);
        if (PyObject_IS_GC(v) && PyObject_GC_IsTracked(v)) return;
    }
    PyObject_GC_UnTrack(t);
}

/* --- trace_session_event's marks ----------------------------------------------------------- */

/* 1 done here, 0 for the Python function (nothing changed), -1 an error. */
static int mark(Compiled *self, PyObject *method, PyObject *session_id) {
    PyObject *parsed = PyDict_GetItemWithError(self->methods, method);
    if (!parsed || !PyTuple_CheckExact(parsed) || PyTuple_GET_SIZE(parsed) != 2) return PyErr_Occurred() ? -1 : 0;
    PyObject *phase = PyTuple_GET_ITEM(parsed, 0), *start = PyTuple_GET_ITEM(parsed, 1);
    if (!registry_of(self)) return PyErr_Occurred() ? -1 : 0;
    if (PyDict_GET_SIZE(self->options)) return 0;  /* registered phases: overlap checks */
    PyObject *state = Py_XNewRef(PyDict_GetItemWithError(self->sessions, session_id));
    if (!state) return PyErr_Occurred() ? -1 : 0;
    int r = 0;
    PyObject *phases = (PyObject *)Py_TYPE(state) == cfg.session_type ? SLOT(state, cfg.session[S_OPEN]) : NULL;
    if (!phases || !PyList_CheckExact(phases)) goto done;
    if (start == Py_True) {
        PyObject *version = SLOT(self->state, self->o_version);
        PyObject *now = clock_ns(self), *thread = now ? thread_ident(self) : NULL;
        PyObject *opened = thread ? PyTuple_Pack(5, phase, now, thread, Py_None, version ? version : Py_None) : NULL;
        Py_XDECREF(now);
        Py_XDECREF(thread);
        if (opened) untrack_leaf(opened);
        r = !opened || PyList_Append(phases, opened) < 0 ? -1 : 1;
        Py_XDECREF(opened);
        goto done;
    }
    if (start != Py_False) goto done;
    Py_ssize_t n = PyList_GET_SIZE(phases);
    PyObject *last = n ? PyList_GET_ITEM(phases, n - 1) : NULL;
    if (!last || !PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != 5) goto done;
    int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 0), phase, Py_EQ);
    if (same <= 0) { r = same; goto done; }
    PyObject *done_list = SLOT(state, cfg.session[S_DONE]);
    if (!done_list || !PyList_CheckExact(done_list)) goto done;
    PyObject *now = clock_ns(self);
    if (!now) { r = -1; goto done; }
    /* SessionState.end_marked: (name, start, end, thread, args, interrupted, version) */
    PyObject *ended = PyTuple_Pack(7, PyTuple_GET_ITEM(last, 0), PyTuple_GET_ITEM(last, 1), now,
                                   PyTuple_GET_ITEM(last, 2), PyTuple_GET_ITEM(last, 3), Py_None,
                                   PyTuple_GET_ITEM(last, 4));
    Py_DECREF(now);
    if (ended) untrack_leaf(ended);
    if (!ended || PyList_Append(done_list, ended) < 0) {
        Py_XDECREF(ended);
        r = -1;
        goto done;
    }
    Py_DECREF(ended);
    /* phases.pop(): shrinking a list does not fail in practice; if it did, the phase has ended
     * all the same, and its stale open entry is only interrupted at finalize. */
    if (PyList_SetSlice(phases, n - 1, n, NULL) < 0) PyErr_Clear();
    r = 1;
done:
    Py_DECREF(state);
    return r;
}

/* (method, session_id=...) or (method, session_id): the shapes a plain mark comes in. */
static PyObject *mark_session(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs == 1 && kwnames && PyTuple_GET_SIZE(kwnames) == 1) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
        if (name == s_session_id || PyUnicode_Compare(name, s_session_id) == 0) return args[1];
    } else if (nargs == 2 && !kwnames) {
        return args[1];
    }
    return NULL;
}

/* --- register_session ------------------------------------------------------------------------ */

/* A new SessionState for task `task` (its id `task_id`), as SessionState.__init__ fills it. */
static PyObject *new_session(Compiled *self, PyObject *session_id, PyObject *task_id, PyObject *task) {
    int used;
    PyObject *span_id = stand_in(self, s_getrandbits, self->getrandbits, bits64, &used);
    if (!used) span_id = PyObject_CallOneArg(self->getrandbits, bits64);
    if (!span_id) return NULL;
    int zero = PyObject_Not(span_id);  /* getrandbits(64) or new_span_id() */
    if (zero) {
        Py_DECREF(span_id);
        if (zero < 0) return NULL;
        PyObject *fn = PyDict_GetItemWithError(self->globals, s_new_span_id);
        if (!fn) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_NameError, "new_span_id");
        if (!(span_id = PyObject_CallNoArgs(fn))) return NULL;
    }
    PyObject *start = clock_ns(self), *thread = start ? thread_ident(self) : NULL;
    PyObject *open = thread ? PyList_New(0) : NULL, *done = open ? PyList_New(0) : NULL;
    PyTypeObject *type = (PyTypeObject *)cfg.session_type;
    PyObject *obj = done ? type->tp_alloc(type, 0) : NULL;
    if (!obj) {
        Py_DECREF(span_id);
        Py_XDECREF(start);
        Py_XDECREF(thread);
        Py_XDECREF(open);
        Py_XDECREF(done);
        return NULL;
    }
    PyObject *version = SLOT(self->state, self->o_version);
    PyObject *values[N_SESSION_SLOTS] = {
        Py_NewRef(session_id), Py_NewRef(task_id), Py_NewRef(task), span_id, start, thread, Py_NewRef(Py_None),
        Py_NewRef(Py_None), open, done, Py_NewRef(Py_None), Py_NewRef(self->pipeline),
        Py_NewRef(version ? version : Py_None), Py_NewRef(Py_None)};
    for (int k = 0; k < N_SESSION_SLOTS; k++) SLOT(obj, cfg.session[k]) = values[k];
    return obj;
}

/* The registry's lock, a threading.Lock, as CPython up to 3.12 lays it out (lockobject in
 * Modules/_threadmodule.c): a try without blocking on its PyThread lock, then its flag set, is
 * what acquire(False) does, and the reverse what release() does, without the method calls and
 * their argument parsing (about 550 instructions each, three a session's steps). 3.13 made it a
 * PyMutex: the methods are called there, as for any other lock type. */
#if PY_VERSION_HEX < 0x030D0000
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock_lock;
    PyObject *in_weakreflist;
    char locked;
} RawLock;
#define RAW_LOCKS 1
#endif
static PyTypeObject *lock_type;  /* _thread.LockType */

/* lock.acquire(blocking): 1 held, 0 not, -1 an error. */
static int lock_acquire(PyObject *lock, PyObject *blocking) {
#ifdef RAW_LOCKS
    if (blocking == Py_False && lock_type && Py_TYPE(lock) == lock_type) {
        RawLock *raw = (RawLock *)lock;
        if (PyThread_acquire_lock_timed(raw->lock_lock, 0, 0) != PY_LOCK_ACQUIRED) return 0;
        raw->locked = 1;
        return 1;
    }
#endif
    PyObject *argv[2] = {lock, blocking};
    PyObject *got = PyObject_VectorcallMethod(s_acquire, argv, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    int held = got == Py_True;
    Py_XDECREF(got);
    return got ? held : -1;
}

/* lock.release(), keeping an error already set: 0, or -1 with release's error (the earlier one
 * dropped). */
static int lock_release(PyObject *lock) {
#ifdef RAW_LOCKS
    if (lock_type && Py_TYPE(lock) == lock_type && ((RawLock *)lock)->locked) {
        ((RawLock *)lock)->locked = 0;
        PyThread_release_lock(((RawLock *)lock)->lock_lock);
        return 0;
    }
#endif
    return call_keeping_error(lock, s_release);
}

/* The new session's id, NULL for the Python function (no error set, nothing changed), or NULL
 * with an error. */
static PyObject *register_one(Compiled *self, PyObject *task_id) {
    if (!registry_of(self)) return NULL;
    PyObject *task = PyDict_GetItemWithError(self->tasks, task_id);
    if (!task || (PyObject *)Py_TYPE(task) != cfg.task_type) return NULL;
    PyObject *idle = SLOT(task, cfg.task_idle), *open = SLOT(task, cfg.task_open);
    if (!idle || !PyLong_CheckExact(idle) || PyObject_IsTrue(idle) || !open || !PySet_CheckExact(open)) return NULL;
    Py_ssize_t max_pending = PyLong_AsSsize_t(self->max_pending);
    if (max_pending == -1 && PyErr_Occurred()) return NULL;
    if (PyObject_Size(self->sessions) + 1 > max_pending) return NULL;  /* an eviction: Python's */
    PyObject *lock = PyObject_GetAttr(self->registry, s_lock);
    if (!lock) return NULL;
    int held = lock_acquire(lock, Py_False);
    if (held <= 0) {  /* another thread is inside the registry: Python's path waits for it */
        Py_DECREF(lock);
        return NULL;
    }
    /* The checks above still hold: nothing ran Python code since. What follows runs none either
     * with the stdlib's clock, ids and ident (a stand-in may; the lock keeps other threads out). */
    Py_INCREF(task);
    PyObject *session_id = PyIter_Next(self->session_ids), *state = NULL, *out = NULL;
    if (!session_id) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "session ids ran out");
        goto release;
    }
    if (!(state = new_session(self, session_id, task_id, task))) goto release;
    if (PyObject_SetItem(self->sessions, session_id, state) < 0) goto release;
    if (PySet_Add(open, session_id) < 0) goto release;
    out = Py_NewRef(session_id);
release:
    if (lock_release(lock) < 0) Py_CLEAR(out);  /* released whatever happened */
    Py_DECREF(lock);
    Py_DECREF(task);
    Py_XDECREF(session_id);
    Py_XDECREF(state);
    if (!out && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "register_session failed");
    return out;
}

/* --- register_task ---------------------------------------------------------------------------
 * Registry.register_task where the context has no current span (nothing to link) and no step in
 * its baggage (the task's trace starts from the empty context), with the pipeline's default
 * sampler and the registry's lock free: the task's LeanSpan as its __init__ fills it (thread
 * ident, span id, clock read in the same order, from spans.py's globals), its TaskState and
 * context, then the task in `tasks`. A task id already registered goes to the Python function
 * (which reports it), with the id drawn here given. */
#define N_SPAN_SLOTS 22
#define N_TASK_SLOTS 8
static PyObject *s_get_ident_span, *s_default_sampling, *s_task_name, *s_task_ids;

static PyObject *call_global(PyObject *globals, PyObject *name, PyObject *arg) {
    PyObject *fn = PyDict_GetItemWithError(globals, name);
    if (!fn) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_NameError, "%U", name);
    return arg ? PyObject_CallOneArg(fn, arg) : PyObject_CallNoArgs(fn);
}

/* The task's span and state (a new TaskState), or NULL on error. */
static PyObject *new_task(Compiled *self, PyObject *task_id) {
    PyObject *g = cfg.spans_globals, *thread = NULL, *span_id = NULL, *start = NULL, *attrs = NULL, *span = NULL;
    PyObject *bag = NULL, *entries = NULL, *ctx = NULL, *open = NULL, *counts = NULL, *task = NULL;
    if (!(thread = call_global(g, s_get_ident_span, NULL)) || !(span_id = call_global(g, s_getrandbits, bits64)))
        goto done;
    int zero = PyObject_Not(span_id);  /* getrandbits(64) or new_span_id() */
    if (zero < 0) goto done;
    if (zero) {
        Py_SETREF(span_id, call_global(g, s_new_span_id, NULL));
        if (!span_id) goto done;
    }
    if (!(start = call_global(g, s_span_clock, NULL)) || !(attrs = PyDict_New())
        || PyDict_SetItem(attrs, cfg.k_kind, cfg.kind_task) < 0 || PyDict_SetItem(attrs, cfg.k_task, task_id) < 0)
        goto done;
    PyTypeObject *st = (PyTypeObject *)cfg.span_type, *tt = (PyTypeObject *)cfg.task_type;
    if (!(span = st->tp_alloc(st, 0))) goto done;
    struct { Py_ssize_t at; PyObject *v; } span_values[N_SPAN_SLOTS] = {
        {cfg.span_name, s_task_name}, {cfg.trace, span_id}, {cfg.parent_span, span_id}, {cfg.span_parent, zero_int},
        {cfg.span_remote, Py_False}, {cfg.flags, one}, {cfg.trace_state, cfg.empty_state}, {cfg.span_start, start},
        {cfg.span_end, zero_int}, {cfg.span_ctx, cfg.empty_context}, {cfg.span_thread, thread},
        {cfg.span_kind, cfg.kind_internal}, {cfg.span_attrs, attrs}, {cfg.span_args, Py_None},
        {cfg.span_category, Py_None}, {cfg.span_events, Py_None}, {cfg.span_links, Py_None},
        {cfg.span_status, cfg.status_unset}, {cfg.span_desc, Py_None}, {cfg.span_pipeline, self->pipeline},
        {cfg.span_token, Py_None}, {cfg.span_sc, Py_None}};
    for (int k = 0; k < N_SPAN_SLOTS; k++) SLOT(span, span_values[k].at) = Py_NewRef(span_values[k].v);
    /* TaskState(task_id, span, Context({_BAGGAGE_KEY: {TASK_ID: task_id}, _SPAN_KEY: span})) */
    if (!(bag = PyDict_New()) || PyDict_SetItem(bag, cfg.k_task, task_id) < 0 || !(entries = PyDict_New())
        || PyDict_SetItem(entries, cfg.baggage_key, bag) < 0 || PyDict_SetItem(entries, cfg.span_key, span) < 0
        || !(ctx = PyObject_CallOneArg(cfg.context_type, entries)) || !(open = PySet_New(NULL))
        || !(counts = PyDict_New()) || !(task = tt->tp_alloc(tt, 0)))
        goto done;
    struct { Py_ssize_t at; PyObject *v; } task_values[N_TASK_SLOTS] = {
        {cfg.task_id, task_id}, {cfg.task_span, span}, {cfg.task_ctx, ctx}, {cfg.task_bag, bag},
        {cfg.task_open, open}, {cfg.task_counts, counts}, {cfg.task_requested, Py_False}, {cfg.task_idle, zero_int}};
    for (int k = 0; k < N_TASK_SLOTS; k++) SLOT(task, task_values[k].at) = Py_NewRef(task_values[k].v);
done:
    Py_XDECREF(thread);
    Py_XDECREF(span_id);
    Py_XDECREF(start);
    Py_XDECREF(attrs);
    Py_XDECREF(span);
    Py_XDECREF(bag);
    Py_XDECREF(entries);
    Py_XDECREF(ctx);
    Py_XDECREF(open);
    Py_XDECREF(counts);
    return task;
}

/* The task id; NULL without an error for the Python function (nothing changed), with *given set
 * where an id was drawn here that it must take; NULL with an error. */
static PyObject *register_task(Compiled *self, PyObject *task_id, PyObject **given) {
    *given = NULL;
    if (cfg.context_var == Py_None || !registry_of(self)) return NULL;
    PyObject *current = NULL, *lock = NULL, *task = NULL, *out = NULL;
    if (PyContextVar_Get(cfg.context_var, NULL, &current) < 0) return NULL;
    if (!current || !PyDict_Check(current)) goto done;
    PyObject *parent = PyDict_GetItemWithError(current, cfg.span_key);
    PyObject *carried = parent || PyErr_Occurred() ? NULL : PyDict_GetItemWithError(current, cfg.baggage_key);
    if (parent || PyErr_Occurred()) goto done;
    if (carried && carried != Py_None) {  /* a step in the baggage starts the task's trace from it */
        if (!PyDict_Check(carried)) goto done;
        PyObject *step = PyDict_GetItemWithError(carried, cfg.k_step);
        if ((step && step != Py_None) || PyErr_Occurred()) goto done;
    }
    PyObject *sampling = PyObject_GetAttr(self->pipeline, s_default_sampling);
    int plain = sampling == Py_True;
    Py_XDECREF(sampling);
    if (!sampling || !plain || !(lock = PyObject_GetAttr(self->registry, s_lock))) goto done;
    int held = lock_acquire(lock, Py_False);
    if (held <= 0) goto done;  /* another thread is inside the registry: Python's path waits for it */
    PyObject *ids = NULL;
    if (task_id == Py_None) {
        if (!(ids = PyObject_GetAttr(self->registry, s_task_ids))) goto release;
        task_id = PyIter_Next(ids);
        Py_DECREF(ids);
        if (!task_id) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "task ids ran out");
            goto release;
        }
    } else {
        Py_INCREF(task_id);
    }
    int known = PyDict_Contains(self->tasks, task_id);
    if (known) {  /* registered twice (Python reports it), or an error */
        if (known > 0) *given = Py_NewRef(task_id);
    } else if ((task = new_task(self, task_id)) && PyDict_SetItem(self->tasks, task_id, task) == 0) {
        out = Py_NewRef(task_id);
    }
    Py_DECREF(task_id);
release:
    if (lock_release(lock) < 0) Py_CLEAR(out);
done:
    Py_XDECREF(current);
    Py_XDECREF(lock);
    Py_XDECREF(task);
    return out;
}

/* Whether session_record builds the record of `state` (see below). */
static int plain_session(PyObject *state) {
    if ((PyObject *)Py_TYPE(state) != cfg.session_type) return 0;
    PyObject *span = SLOT(state, cfg.session[S_SPAN]), *open = SLOT(state, cfg.session[S_OPEN]), *done = SLOT(state, cfg.session[S_DONE]);
    PyObject *counters = SLOT(state, cfg.session[S_COUNTERS]), *extra = SLOT(state, cfg.session[S_EXTRA]);
    PyObject *task = SLOT(state, cfg.session[S_TASK]);
    if (span != Py_None || !open || !PyList_CheckExact(open) || PyList_GET_SIZE(open) || !done
        || !PyList_CheckExact(done) || counters != Py_None || extra != Py_None || !task
        || (PyObject *)Py_TYPE(task) != cfg.task_type)
        return 0;
    PyObject *parent = SLOT(task, cfg.task_span), *bag = SLOT(task, cfg.task_bag);
    return parent && (PyObject *)Py_TYPE(parent) == cfg.span_type && bag && SLOT(parent, cfg.trace_state) == cfg.empty_state;
}

static PyObject *build_record(PyObject *state, PyObject *status, PyObject *reason, PyObject *code,
                              PyObject *description, PyObject *end_ns, PyObject **phases_out);

/* --- a finalized session's record -------------------------------------------------------------
 * session_record(state, status, reason, code, description, end_ns): for a session finalized with
 * no step in force and no extra attributes, whose span object was never made, with no open phase,
 * no counter and nothing set on it, and its task's trace state empty, the record SessionState.record
 * builds from the attributes _finalize_all gives it; None for any other session (nothing built). */
static PyObject *session_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "session_record(state, status, reason, code, description, end_ns)");
        return NULL;
    }
    if (!cfg.name) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *state = args[0];
    if (!plain_session(state)) Py_RETURN_NONE;
    return build_record(state, args[1], args[2], args[3], args[4], args[5], NULL);
}

/* The record of a session plain_session() took; *phases_out (where given): its ended phases as a
 * tuple, a new reference. */
static PyObject *build_record(PyObject *state, PyObject *status, PyObject *reason, PyObject *code,
                              PyObject *description, PyObject *end_ns, PyObject **phases_out) {
    PyObject *done = SLOT(state, cfg.session[S_DONE]), *task = SLOT(state, cfg.session[S_TASK]);
    PyObject *parent = SLOT(task, cfg.task_span), *bag = SLOT(task, cfg.task_bag);
    PyObject *sid = SLOT(state, cfg.session[S_SESSION_ID]), *tid = SLOT(state, cfg.session[S_TASK_ID]), *version = SLOT(state, cfg.session[S_VERSION]);
    PyObject *rec = NULL, *attrs = PyDict_New();
    /* SessionState.attributes(), then what _finalize_all sets, in the same order */
    if (!attrs || PyDict_SetItem(attrs, cfg.k_kind, cfg.kind_session) < 0
        || PyDict_SetItem(attrs, cfg.k_session, sid) < 0 || PyDict_SetItem(attrs, cfg.k_task, tid) < 0
        || (version != Py_None && PyDict_SetItem(attrs, cfg.k_version, version) < 0)
        || PyDict_SetItem(attrs, cfg.k_status, status) < 0
        || (reason != Py_None && PyDict_SetItem(attrs, cfg.k_reason, reason) < 0))
        goto done;
    PyObject *bundle = Py_None, *phases;  /* record.bundle(session id, done) */
    if (PyList_GET_SIZE(done)) {
        phases = PyList_AsTuple(done);
        if (phases) untrack_leaf(phases);
        if (!phases || !(bundle = PyTuple_Pack(2, sid, phases))) {
            Py_XDECREF(phases);
            goto done;
        }
        untrack_leaf(bundle);
    } else {
        if (!(phases = PyTuple_New(0))) goto done;
        Py_INCREF(bundle);
    }
    PyObject *v[N_FIELDS] = {
        cfg.name, SLOT(parent, cfg.trace), SLOT(state, cfg.session[S_SPAN_ID]), SLOT(parent, cfg.parent_span),
        Py_False, SLOT(parent, cfg.flags), Py_None, SLOT(state, cfg.session[S_START]), end_ns, zero_int, bag,
        SLOT(state, cfg.session[S_THREAD]), Py_None, attrs, Py_None, Py_None, Py_None, code, description, Py_None, bundle};
    if (!(rec = PyTuple_New(cfg.fields))) { Py_DECREF(bundle); Py_DECREF(phases); goto done; }
    for (int k = 0; k < N_FIELDS; k++) {
        if (!v[k]) { PyErr_SetString(PyExc_TypeError, "a session of an unexpected shape"); Py_CLEAR(rec); break; }
        PyTuple_SET_ITEM(rec, cfg.at[k], Py_NewRef(v[k]));
    }
    if (rec) untrack_leaf(rec);
    if (rec && phases_out) *phases_out = phases;
    else Py_DECREF(phases);
    Py_DECREF(bundle);
done:
    Py_XDECREF(attrs);
    return rec;
}

/* --- a task's plain sessions finalized ----------------------------------------------------------
 * finalize_task_sessions(registry, task, status, time_ns, current_id): what Registry.finalize_task
 * does with the open sessions of `task` (its finalize_requested already set) when the task is
 * finalized with a known status given as text, no reason and no reward: their records (each one
 * session_record builds), then their bookkeeping, as _finalize_all does them. True when done; False
 * for any other call (a session it does not build, a step in force, an idle task waiting, the
 * registry's lock held), having changed nothing: the Python steps take it. In the session
 * benchmark _finalize_all's Python steps were about half of what the training thread paid. */
static PyObject *s_enqueue, *s_finalized, *s_recent, *s_idle, *s_end_idle_tasks, *s_queue, *s_max_queue_size,
    *s_wake_at, *s_wake, *s_set, *s_append;

/* Where records are queued: Pipeline.enqueue as LeanSpan.__exit__ inlines it. A record is appended
 * to the pipeline's queue while it holds fewer than max_queue_size (the wake event set when it
 * reaches wake_at); otherwise (a full queue, counted there; a pipeline shut down, whose bound is 0)
 * the pipeline's enqueue takes it. */
typedef struct { PyObject *pipeline, *queue; Py_ssize_t max, wake_at; } Sink;

static int sink_open(Sink *k, PyObject *pipeline) {
    k->pipeline = pipeline;
    PyObject *max = NULL, *wake_at = NULL;
    if (!(k->queue = PyObject_GetAttr(pipeline, s_queue)) || !(max = PyObject_GetAttr(pipeline, s_max_queue_size))
        || !(wake_at = PyObject_GetAttr(pipeline, s_wake_at)))
        goto failed;
    k->max = PyLong_AsSsize_t(max);
    k->wake_at = PyLong_AsSsize_t(wake_at);
    if ((k->max == -1 || k->wake_at == -1) && PyErr_Occurred()) goto failed;
    Py_DECREF(max);
    Py_DECREF(wake_at);
    return 0;
failed:
    Py_CLEAR(k->queue);
    Py_XDECREF(max);
    Py_XDECREF(wake_at);
    return -1;
}

static int sink_put(Sink *k, PyObject *rec) {
    Py_ssize_t n = PyObject_Size(k->queue);
    if (n < 0) return -1;
    PyObject *got = n < k->max ? PyObject_CallMethodOneArg(k->queue, s_append, rec)
                               : PyObject_CallMethodOneArg(k->pipeline, s_enqueue, rec);
    if (!got) return -1;
    Py_DECREF(got);
    if (n < k->max && n + 1 == k->wake_at) {
        PyObject *wake = PyObject_GetAttr(k->pipeline, s_wake);
        got = wake ? PyObject_CallMethodNoArgs(wake, s_set) : NULL;
        Py_XDECREF(wake);
        if (!got) return -1;
        Py_DECREF(got);
    }
    return 0;
}

static int keep_latest(PyObject *registry, PyObject *name, PyObject *ids, Py_ssize_t kept) {
    if (PyDict_GET_SIZE(ids) <= 2 * kept) return 0;  /* _keep_latest's own test, without the call */
    PyObject *n = PyLong_FromSsize_t(kept), *trimmed = n ? PyObject_CallFunctionObjArgs(cfg.keep_latest, ids, n, NULL) : NULL;
    Py_XDECREF(n);
    int r = trimmed ? PyObject_SetAttr(registry, name, trimmed) : -1;
    Py_XDECREF(trimmed);
    return r;
}

/* The bookkeeping of one finalized session, under the registry's lock (_finalize_all's loop). */
static int settle(PyObject *state, PyObject *phases, PyObject *status, PyObject *end_ns, PyObject *finalized,
                  PyObject *recent, PyObject *tasks, PyObject *idle) {
    PyObject *sid = SLOT(state, cfg.session[S_SESSION_ID]), *tid = SLOT(state, cfg.session[S_TASK_ID]);
    PyObject *own = SLOT(state, cfg.session[S_TASK]), *span = SLOT(own, cfg.task_span);
    PyObject *entry = PyTuple_Pack(5, tid, SLOT(span, cfg.trace), SLOT(state, cfg.session[S_SPAN_ID]),
                                   SLOT(state, cfg.session[S_VERSION]), phases);
    if (!entry) return -1;
    untrack_leaf(entry);
    int r = PyDict_SetItem(finalized, sid, Py_None) < 0 || PyDict_SetItem(recent, sid, entry) < 0 ? -1 : 0;
    Py_DECREF(entry);
    if (r < 0) return -1;
    PyObject *task = PyDict_GetItemWithError(tasks, tid);
    if (!task) return PyErr_Occurred() ? -1 : 0;
    if ((PyObject *)Py_TYPE(task) != cfg.task_type) {
        PyErr_SetString(PyExc_TypeError, "a task of an unexpected type");
        return -1;
    }
    Py_INCREF(task);
    PyObject *open = SLOT(task, cfg.task_open), *counts = SLOT(task, cfg.task_counts), *count = NULL, *next = NULL;
    r = -1;
    if (!open || !PySet_Check(open) || !counts || !PyDict_Check(counts)) {
        PyErr_SetString(PyExc_TypeError, "a task of an unexpected shape");
        goto done;
    }
    if (PySet_Discard(open, sid) < 0) goto done;
    count = PyDict_GetItemWithError(counts, status);  /* counts.get(status, 0) + 1 */
    if (!count && PyErr_Occurred()) goto done;
    next = count ? PyNumber_Add(count, one) : Py_NewRef(one);
    if (!next || PyDict_SetItem(counts, status, next) < 0) goto done;
    PyObject *requested = SLOT(task, cfg.task_requested);
    int asked = requested ? PyObject_IsTrue(requested) : 0;
    if (asked < 0) goto done;
    if (!PySet_GET_SIZE(open) && !asked) {  /* ends once idle for the grace period */
        Py_XSETREF(SLOT(task, cfg.task_idle), Py_NewRef(end_ns));
        if (PyObject_SetItem(idle, SLOT(task, cfg.task_id), task) < 0) goto done;
    }
    r = 0;
done:
    Py_XDECREF(next);
    Py_DECREF(task);
    return r;
}

/* Whether current_id(keys.STEP) is not None: a step in the current context's baggage, read
 * here from the context variable where it is known (a call of the Python function costs about
 * 1,200 instructions a task). 1, 0, or -1 on error. */
static int step_in_force(PyObject *current_id) {
    PyObject *current = NULL, *step = NULL;
    if (cfg.context_var != Py_None && PyContextVar_Get(cfg.context_var, NULL, &current) < 0) return -1;
    if (cfg.context_var == Py_None || (current && !PyDict_Check(current))) {
        step = PyObject_CallOneArg(current_id, cfg.k_step);  /* a context of its own kind: its reading */
    } else if (current) {
        /* a mapping: current_id asks bag.get(key), and a value that is not None stands */
        PyObject *bag = PyDict_GetItemWithError(current, cfg.baggage_key);
        step = !bag ? (PyErr_Occurred() ? NULL : Py_NewRef(Py_None))
               : bag == Py_None ? Py_NewRef(Py_None)
               : PyDict_Check(bag) ? Py_XNewRef(PyDict_GetItemWithError(bag, cfg.k_step))
               : PyObject_CallMethodOneArg(bag, s_get, cfg.k_step);
        if (!step && !PyErr_Occurred()) step = Py_NewRef(Py_None);
    } else {
        step = Py_NewRef(Py_None);  /* no context set: empty */
    }
    Py_XDECREF(current);
    int r = step ? step != Py_None : -1;
    Py_XDECREF(step);
    return r;
}

/* True, False or NULL (an error), as finalize_task_sessions() below. */
static PyObject *finalize_sessions(PyObject *registry, PyObject *task, PyObject *status, PyObject *time_ns,
                                   PyObject *current_id) {
    if (!PyUnicode_CheckExact(status) || (PyObject *)Py_TYPE(task) != cfg.task_type) Py_RETURN_FALSE;
    int known = PySequence_Contains(cfg.statuses, status);
    if (known <= 0) return known < 0 ? NULL : Py_NewRef(Py_False);
    PyObject *open = SLOT(task, cfg.task_open);
    if (!open || !PySet_CheckExact(open)) Py_RETURN_FALSE;
    PyObject *out = NULL, *sessions = NULL, *tasks = NULL, *lock = NULL, *finalized = NULL, *recent = NULL,
             *idle = NULL, *pipeline = NULL, *ids = NULL, *states = NULL, *phases = NULL, *end_ns = NULL;
    Sink sink = {NULL};
    if (!(sessions = PyObject_GetAttr(registry, s_sessions)) || !(tasks = PyObject_GetAttr(registry, s_tasks))
        || !(lock = PyObject_GetAttr(registry, s_lock)) || !(idle = PyObject_GetAttr(registry, s_idle))
        || !(pipeline = PyObject_GetAttr(registry, s_pipeline)))
        goto done;
    out = Py_NewRef(Py_False);
    if (!PyDict_Check(sessions) || !PyDict_CheckExact(tasks) || !PyDict_Check(idle) || PyDict_GET_SIZE(idle))
        goto done;
    /* current_id(keys.STEP): a step in force goes on the records (the Python steps') */
    int stepped = step_in_force(current_id);
    if (stepped < 0) goto failed;
    if (stepped) goto done;
    /* list(task.open_sessions), each still registered and plain; nothing ran Python code since */
    if (!(ids = PySequence_List(open)) || !(states = PyList_New(0))) goto failed;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ids); k++) {
        PyObject *state = PyDict_GetItemWithError(sessions, PyList_GET_ITEM(ids, k));
        if (!state) {
            if (PyErr_Occurred()) goto failed;
            continue;
        }
        if (!plain_session(state)) goto done;
        if (PyList_Append(states, state) < 0) goto failed;
    }
    int held = lock_acquire(lock, Py_False);
    if (held < 0) goto failed;
    if (!held) goto done;  /* another thread is inside the registry: the Python steps wait for it */
    /* From here on the sessions are this call's: taken out of the registry, they are finalized. */
    Py_SETREF(out, NULL);
    int r = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(states) && r == 0; k++)
        r = PyObject_DelItem(sessions, SLOT(PyList_GET_ITEM(states, k), cfg.session[S_SESSION_ID]));
    if (lock_release(lock) < 0 || r < 0) goto failed;
    Py_ssize_t n = PyList_GET_SIZE(states);
    if (!n) {
        out = Py_NewRef(Py_True);
        goto done;
    }
    int failed = PyObject_RichCompareBool(status, cfg.failed, Py_EQ);
    if (failed < 0 || !(end_ns = PyObject_CallNoArgs(time_ns)) || !(phases = PyList_New(n))
        || sink_open(&sink, pipeline) < 0)
        goto failed;
    PyObject *code = failed ? cfg.error_code : zero_int, *description = failed ? cfg.failed : Py_None;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *kept = NULL;
        PyObject *rec = build_record(PyList_GET_ITEM(states, k), status, Py_None, code, description, end_ns, &kept);
        if (!rec) goto failed;
        PyList_SET_ITEM(phases, k, kept);
        int queued = sink_put(&sink, rec);
        Py_DECREF(rec);
        if (queued < 0) goto failed;
    }
    if (!(finalized = PyObject_GetAttr(registry, s_finalized)) || !(recent = PyObject_GetAttr(registry, s_recent)))
        goto failed;
    if (!PyDict_CheckExact(finalized) || !PyDict_CheckExact(recent)) {
        PyErr_SetString(PyExc_TypeError, "a registry of an unexpected shape");
        goto failed;
    }
    if (lock_acquire(lock, Py_True) < 0) goto failed;
    for (Py_ssize_t k = 0; k < n && r == 0; k++)
        r = settle(PyList_GET_ITEM(states, k), PyList_GET_ITEM(phases, k), status, end_ns, finalized, recent, tasks, idle);
    if (r == 0) r = keep_latest(registry, s_finalized, finalized, cfg.finalized_kept);
    if (r == 0) r = keep_latest(registry, s_recent, recent, cfg.recent_kept);
    if (lock_release(lock) < 0 || r < 0) goto failed;  /* released whatever happened */
    if (PyDict_GET_SIZE(idle)) {  /* another thread's task went idle meanwhile */
        PyObject *argv[2] = {registry, end_ns};
        PyObject *got = PyObject_VectorcallMethod(s_end_idle_tasks, argv, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (!got) goto failed;
        Py_DECREF(got);
    }
    out = Py_NewRef(Py_True);
    goto done;
failed:
    Py_CLEAR(out);
done:
    Py_XDECREF(sessions);
    Py_XDECREF(tasks);
    Py_XDECREF(lock);
    Py_XDECREF(finalized);
    Py_XDECREF(recent);
    Py_XDECREF(idle);
    Py_XDECREF(pipeline);
    Py_XDECREF(sink.queue);
    Py_XDECREF(ids);
    Py_XDECREF(states);
    Py_XDECREF(phases);
    Py_XDECREF(end_ns);
    return out;
}

static PyObject *finalize_task_sessions(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "finalize_task_sessions(registry, task, status, time_ns, current_id)");
        return NULL;
    }
    if (!cfg.name) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    return finalize_sessions(args[0], args[1], args[2], args[3], args[4]);
}

/* --- a task's end -------------------------------------------------------------------------------
 * Registry._end_task for a task span as register_task makes it (no trace state, event, link or
 * status; kind internal; not ended): its session counts set as the span's attributes, in the same
 * order, the span ended on spans._time_ns and its record (record.from_span's) queued on its
 * pipeline. 1 done; 0 for the Python steps (nothing changed); -1 an error. */
static PyObject *count_of(PyObject *counts, PyObject *status) {  /* counts.get(status, 0), borrowed */
    PyObject *v = PyDict_GetItemWithError(counts, status);
    return v ? v : PyErr_Occurred() ? NULL : zero_int;
}

static int end_task(PyObject *task) {
    PyObject *span = SLOT(task, cfg.task_span), *counts = SLOT(task, cfg.task_counts);
    if (!span || (PyObject *)Py_TYPE(span) != cfg.span_type || !counts || !PyDict_CheckExact(counts)) return 0;
    PyObject *attrs = SLOT(span, cfg.span_attrs), *ctx = SLOT(span, cfg.span_ctx), *ended = SLOT(span, cfg.span_end);
    if (!attrs || !PyDict_CheckExact(attrs) || !ctx || !PyDict_Check(ctx) || !ended || ended != zero_int
        || SLOT(span, cfg.trace_state) != cfg.empty_state || SLOT(span, cfg.span_events) != Py_None
        || SLOT(span, cfg.span_links) != Py_None || SLOT(span, cfg.span_kind) != cfg.kind_internal
        || SLOT(span, cfg.span_status) != cfg.status_unset)
        return 0;
    PyObject *clock = PyDict_GetItemWithError(cfg.spans_globals, s_span_clock);
    if (!clock) return PyErr_Occurred() ? -1 : 0;
    /* the sessions (finished, summed from 0 as sum() does, and pending), then each status's count
     * (TASK_STATUSES, in TASK_KEYS' order), then the acceptance rate */
    PyObject *values[6] = {NULL}, *finished = Py_NewRef(zero_int), *end = NULL, *rec = NULL;
    int r = -1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(cfg.final_statuses); k++) {
        PyObject *c = count_of(counts, PyTuple_GET_ITEM(cfg.final_statuses, k));
        if (!c) goto done;
        Py_SETREF(finished, PyNumber_Add(finished, c));
        if (!finished) goto done;
    }
    for (Py_ssize_t k = 0; k < 4; k++) {
        PyObject *c = count_of(counts, PyTuple_GET_ITEM(cfg.task_statuses, k));
        if (!c) goto done;
        values[1 + k] = Py_NewRef(c);
    }
    PyObject *pending = count_of(counts, cfg.pending), *accepted = count_of(counts, cfg.accepted);
    if (!pending || !accepted || !(values[0] = PyNumber_Add(finished, pending))) goto done;
    int any = PyObject_IsTrue(finished);
    if (any < 0 || !(values[5] = any ? PyNumber_TrueDivide(accepted, finished) : PyFloat_FromDouble(0.0))) goto done;
    for (int k = 0; k < 6; k++)
        if (PyDict_SetItem(attrs, PyTuple_GET_ITEM(cfg.task_keys, k), values[k]) < 0) goto done;
    if (!(end = PyObject_CallNoArgs(clock))) goto done;
    Py_XSETREF(SLOT(span, cfg.span_end), Py_NewRef(end));
    PyObject *ids = PyDict_GetItemWithError(ctx, cfg.baggage_key);
    if (!ids && PyErr_Occurred()) goto done;
    PyObject *v[N_FIELDS] = {
        SLOT(span, cfg.span_name), SLOT(span, cfg.trace), SLOT(span, cfg.parent_span), SLOT(span, cfg.span_parent),
        SLOT(span, cfg.span_remote), SLOT(span, cfg.flags), Py_None, SLOT(span, cfg.span_start), end, zero_int,
        ids ? ids : Py_None, SLOT(span, cfg.span_thread), SLOT(span, cfg.span_category), attrs,
        SLOT(span, cfg.span_args), Py_None, Py_None, zero_int, SLOT(span, cfg.span_desc), Py_None, Py_None};
    if (!(rec = PyTuple_New(cfg.fields))) goto done;
    for (int k = 0; k < N_FIELDS; k++) {
        if (!v[k]) {
            PyErr_SetString(PyExc_TypeError, "a task span of an unexpected shape");
            goto done;
        }
        PyTuple_SET_ITEM(rec, cfg.at[k], Py_NewRef(v[k]));
    }
    /* as a session's record: it waits in the queue for the sender, and tracked, it was carried
     * into the oldest generation, whose growth sets off full collections of the user's heap */
    untrack_leaf(rec);
    PyObject *pipeline = SLOT(span, cfg.span_pipeline);
    Sink sink = {NULL};
    if (!pipeline || sink_open(&sink, pipeline) < 0) goto done;
    r = sink_put(&sink, rec) < 0 ? -1 : 1;
    Py_DECREF(sink.queue);
done:
    for (int k = 0; k < 6; k++) Py_XDECREF(values[k]);
    Py_XDECREF(finished);
    Py_XDECREF(end);
    Py_XDECREF(rec);
    return r;
}

/* trace_session_event("mark_finalized", task_id=..., [status=...]): Registry.finalize_task for a
 * registered task whose sessions finalize_sessions() takes, then its end as end_task() makes it
 * (or _end_task's Python, for another task span). 1 done; 0 for the Python function (nothing
 * changed but the task's finalize_requested, which it sets too); -1 an error before anything
 * changed; -2 an error after (reported, as the Python function's guard reports one). */
static PyObject *s_mark_finalized, *s_task_id, *s_status, *s_current_id, *s_end_task, *s_pop;

static int finalize_task(Compiled *self, PyObject *const *args, PyObject *kwnames) {
    PyObject *task_id = NULL, *status = cfg.accepted;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        if (name == s_task_id || PyUnicode_Compare(name, s_task_id) == 0) task_id = args[1 + k];
        else if (name == s_status || PyUnicode_Compare(name, s_status) == 0) status = args[1 + k];
        else return PyErr_Occurred() ? -1 : 0;
    }
    if (!task_id || task_id == Py_None || !PyUnicode_CheckExact(status)) return 0;
    PyObject *registry = registry_of(self);
    if (!registry) return PyErr_Occurred() ? -1 : 0;
    PyObject *task = PyDict_GetItemWithError(self->tasks, task_id);
    if (!task || (PyObject *)Py_TYPE(task) != cfg.task_type) return PyErr_Occurred() ? -1 : 0;
    PyObject *clock = PyDict_GetItemWithError(cfg.tracking_globals, s_time_ns);
    PyObject *current_id = clock ? PyDict_GetItemWithError(cfg.tracking_globals, s_current_id) : NULL;
    if (!current_id) return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(task);
    Py_INCREF(registry);
    Py_XSETREF(SLOT(task, cfg.task_requested), Py_NewRef(Py_True));
    PyObject *idle = NULL, *lock = NULL, *got = finalize_sessions(registry, task, status, clock, current_id);
    int r = got == Py_False ? 0 : -2;  /* an error from here on may come after sessions were finalized */
    if (got != Py_True) goto done;
    /* with self._lock: self._idle.pop(task_id, None); ended = self.tasks.pop(task_id, None) */
    if (!(idle = PyObject_GetAttr(registry, s_idle)) || !(lock = PyObject_GetAttr(registry, s_lock))) goto done;
    if (lock_acquire(lock, Py_True) < 0) goto done;
    int in_idle = PyDict_Check(idle) ? PyDict_Contains(idle, task_id) : -1, ended = 0;
    if (in_idle > 0) {  /* an OrderedDict: its own pop keeps its order */
        PyObject *popped = PyObject_CallMethodObjArgs(idle, s_pop, task_id, Py_None, NULL);
        in_idle = popped ? 0 : -1;
        Py_XDECREF(popped);
    }
    if (in_idle == 0 && (ended = PyDict_Contains(self->tasks, task_id)) > 0 && PyDict_DelItem(self->tasks, task_id) < 0)
        ended = -1;
    if (lock_release(lock) < 0 || in_idle < 0 || ended < 0) goto done;
    if (ended) {
        int e = end_task(task);
        if (e == 0) {  /* another task span: _end_task's Python */
            PyObject *argv[2] = {registry, task};
            PyObject *none = PyObject_VectorcallMethod(s_end_task, argv, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            e = none ? 1 : -1;
            Py_XDECREF(none);
        }
        if (e < 0) goto done;
    }
    r = 1;
done:
    Py_XDECREF(got);
    Py_XDECREF(idle);
    Py_XDECREF(lock);
    Py_DECREF(task);
    Py_DECREF(registry);
    return r;
}

static void config_clear(Config *c) {
    for (int k = 0; k < N_CFG_REFS; k++) Py_CLEAR(c->refs[k]);
}

/* configure(dict): tracking.py's classes, keys and record layout; all of it or, on an error,
 * nothing (what was configured before stays). */
static PyObject *configure(PyObject *module, PyObject *config) {
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes a dict");
        return NULL;
    }
    Config c;
    memset(&c, 0, sizeof(c));
    PyObject *layout = NULL;
    if (take(config, "SessionState", &c.session_type) || take(config, "TaskState", &c.task_type)
        || take(config, "LeanSpan", &c.span_type) || take(config, "EMPTY_TRACE_STATE", &c.empty_state)
        || take(config, "SPAN_KIND", &c.k_kind) || take(config, "KIND_SESSION", &c.kind_session)
        || take(config, "SESSION_ID", &c.k_session) || take(config, "TASK_ID", &c.k_task)
        || take(config, "POLICY_VERSION", &c.k_version) || take(config, "SESSION_STATUS", &c.k_status)
        || take(config, "SESSION_REASON", &c.k_reason) || take(config, "layout", &layout)
        || take(config, "STEP", &c.k_step) || take(config, "STATUSES", &c.statuses)
        || take(config, "STATUS_FAILED", &c.failed) || take(config, "ERROR_CODE", &c.error_code)
        || take(config, "keep_latest", &c.keep_latest) || take_index(config, "FINALIZED_KEPT", &c.finalized_kept)
        || take_index(config, "RECENT_SESSIONS", &c.recent_kept) || take(config, "STATUS_ACCEPTED", &c.accepted)
        || take(config, "STATUS_PENDING", &c.pending) || take(config, "FINAL_STATUSES", &c.final_statuses)
        || take(config, "TASK_STATUSES", &c.task_statuses)
        || take(config, "TASK_KEYS", &c.task_keys) || take(config, "BAGGAGE_KEY", &c.baggage_key)
        || take(config, "KIND_INTERNAL", &c.kind_internal) || take(config, "STATUS_UNSET", &c.status_unset)
        || take(config, "tracking_globals", &c.tracking_globals) || take(config, "spans_globals", &c.spans_globals)
        || take(config, "CONTEXT_VAR", &c.context_var) || take(config, "Context", &c.context_type)
        || take(config, "EMPTY_CONTEXT", &c.empty_context)
        || take(config, "SPAN_KEY", &c.span_key) || take(config, "KIND_TASK", &c.kind_task))
        goto failed;
    if (!PyTuple_CheckExact(c.statuses) || !PyTuple_CheckExact(c.final_statuses) || !PyTuple_CheckExact(c.task_statuses)
        || PyTuple_GET_SIZE(c.task_statuses) != 4 || !PyTuple_CheckExact(c.task_keys)
        || PyTuple_GET_SIZE(c.task_keys) != 6 || !PyDict_Check(c.tracking_globals) || !PyDict_Check(c.spans_globals))
        goto misfit;
    if (!PyType_Check(c.session_type) || !PyType_Check(c.task_type) || !PyType_Check(c.span_type)
        || !PyDict_Check(layout) || take_index(layout, "fields", &c.fields) < 0 || c.fields != N_FIELDS)
        goto misfit;
    int taken[N_FIELDS] = {0};
    for (int k = 0; k < N_FIELDS; k++) {
        if (take_index(layout, field_names[k], &c.at[k]) < 0 || c.at[k] >= N_FIELDS || taken[c.at[k]]) goto misfit;
        taken[c.at[k]] = 1;
    }
    /* Every slot of SessionState is one new_session() sets, and it has no other storage. */
    PyTypeObject *ss = (PyTypeObject *)c.session_type, *ts = (PyTypeObject *)c.task_type,
                 *ls = (PyTypeObject *)c.span_type;
    PyObject *declared = PyDict_GetItemString(ss->tp_dict, "__slots__");
    if (!declared || !PyTuple_Check(declared) || PyTuple_GET_SIZE(declared) != N_SESSION_SLOTS || ss->tp_dictoffset
        || ss->tp_base != &PyBaseObject_Type) {
        PyErr_Format(PyExc_TypeError, "%s's slots are not the %d a session is made with", ss->tp_name, N_SESSION_SLOTS);
        goto failed;
    }
    for (int k = 0; k < N_SESSION_SLOTS; k++)
        if (slot_offset(ss, session_slots[k], &c.session[k]) < 0) goto failed;
    /* LeanSpan's and TaskState's slots are the ones new_task() sets */
    PyObject *span_slots = PyDict_GetItemString(ls->tp_dict, "__slots__");
    PyObject *task_slots = PyDict_GetItemString(ts->tp_dict, "__slots__");
    if (!span_slots || !PyTuple_Check(span_slots) || PyTuple_GET_SIZE(span_slots) != N_SPAN_SLOTS || !task_slots
        || !PyTuple_Check(task_slots) || PyTuple_GET_SIZE(task_slots) != N_TASK_SLOTS || ts->tp_dictoffset
        || ts->tp_base != &PyBaseObject_Type) {
        PyErr_Format(PyExc_TypeError, "%s's or %s's slots are not the ones a task is made with", ls->tp_name,
                     ts->tp_name);
        goto failed;
    }
    if (slot_offset(ts, "span", &c.task_span) || slot_offset(ts, "bag", &c.task_bag)
        || slot_offset(ts, "open_sessions", &c.task_open) || slot_offset(ts, "idle_since", &c.task_idle)
        || slot_offset(ts, "task_id", &c.task_id) || slot_offset(ts, "counts", &c.task_counts)
        || slot_offset(ts, "finalize_requested", &c.task_requested)
        || slot_offset(ls, "trace_id", &c.trace) || slot_offset(ls, "span_id", &c.parent_span)
        || slot_offset(ls, "flags", &c.flags) || slot_offset(ls, "trace_state", &c.trace_state)
        || slot_offset(ls, "name", &c.span_name) || slot_offset(ls, "parent_id", &c.span_parent)
        || slot_offset(ls, "parent_remote", &c.span_remote) || slot_offset(ls, "start_ns", &c.span_start)
        || slot_offset(ls, "end_ns", &c.span_end) || slot_offset(ls, "ctx", &c.span_ctx)
        || slot_offset(ls, "thread", &c.span_thread) || slot_offset(ls, "kind", &c.span_kind)
        || slot_offset(ls, "attributes", &c.span_attrs) || slot_offset(ls, "args", &c.span_args)
        || slot_offset(ls, "category", &c.span_category) || slot_offset(ls, "events", &c.span_events)
        || slot_offset(ls, "links", &c.span_links) || slot_offset(ls, "status_code", &c.span_status)
        || slot_offset(ls, "status_desc", &c.span_desc) || slot_offset(ls, "_pipeline", &c.span_pipeline)
        || slot_offset(ls, "_token", &c.span_token) || slot_offset(ls, "_sc", &c.span_sc)
        || slot_offset(ts, "ctx", &c.task_ctx)
        || !(c.name = PyUnicode_InternFromString("session")))
        goto failed;
    Py_DECREF(layout);
    Config old = cfg;
    cfg = c;
    config_clear(&old);  /* after the swap: freeing may run code */
    Py_RETURN_NONE;
misfit:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "configure(): classes or a layout that do not fit");
failed:
    Py_XDECREF(layout);
    config_clear(&c);
    return NULL;
}

/* --- the callable ---------------------------------------------------------------------------- */

/* The error set now, reported as the Python function's guard reports one (its module's
 * _report_compiled_error, given the function's name); `result` (what the guard returns), so that
 * nothing reaches the caller. */
static PyObject *report_internal(Compiled *self, PyObject *result) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *fn = PyDict_GetItemWithError(self->globals, s_report);
    PyObject *name = fn && value ? PyObject_GetAttrString(self->slow, "__name__") : NULL;
    PyObject *got = name ? PyObject_CallFunctionObjArgs(fn, name, value, NULL) : NULL;
    Py_XDECREF(name);
    Py_XDECREF(got);
    PyErr_Clear();  /* a reporter that fails loses the report, never the caller's call */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return Py_NewRef(result);
}

static PyObject *call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Compiled *self = (Compiled *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *on = SLOT(self->state, self->o_sessions_on);
    if (on == Py_True && self->kind == EVENT) {
        PyObject *session_id = mark_session(args, nargs, kwnames);
        if (session_id && session_id != Py_None && PyUnicode_CheckExact(args[0])) {
            int r = mark(self, args[0], session_id);
            if (r > 0) Py_RETURN_NONE;
            if (r < 0) PyErr_Clear();  /* the Python path does it again, under its guard */
        } else if (!session_id && nargs == 1 && kwnames && PyUnicode_CheckExact(args[0])
                   && (args[0] == s_mark_finalized || PyUnicode_Compare(args[0], s_mark_finalized) == 0)) {
            int r = finalize_task(self, args, kwnames);
            if (r > 0) Py_RETURN_NONE;
            if (r == -2) return report_internal(self, Py_None);
            if (r < 0) PyErr_Clear();  /* nothing changed: the Python path does it again, under its guard */
        }
    } else if (on == Py_True && self->kind == REGISTER && nargs == 1 && !kwnames && args[0] != Py_None) {
        /* register_session(task_id) */
        PyObject *session_id = register_one(self, args[0]);
        if (session_id) return session_id;
        /* An error here changed nothing the Python path would see twice: a session it made is
         * dropped with the error, before its task or the registry hold it. */
        PyErr_Clear();
    } else if (on == Py_True && self->kind == REGISTER_TASK && nargs <= 1 && !kwnames) {
        /* register_task() or register_task(task_id) */
        PyObject *given, *task_id = register_task(self, nargs ? args[0] : Py_None, &given);
        if (task_id) return task_id;
        if (PyErr_Occurred()) return report_internal(self, nargs ? args[0] : Py_None);
        if (given) {
            PyObject *got = PyObject_CallOneArg(self->slow, given);
            Py_DECREF(given);
            return got;
        }
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}


static PyTypeObject CompiledType;

/* A Compiled of `kind` around slow, with STATE's slots and the stdlib functions its globals hold. */
static Compiled *make(int kind, PyObject *slow, PyObject *state, PyObject *globals) {
    if (!cfg.name) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    PyObject *time_ns = PyDict_GetItemWithError(globals, s_time_ns);
    PyObject *get_ident = time_ns ? PyDict_GetItemWithError(globals, s_get_ident) : NULL;
    if (!time_ns || !get_ident) return PyErr_Occurred() ? NULL : (void *)PyErr_Format(PyExc_KeyError, "time_ns, get_ident");
    Compiled *self = PyObject_GC_New(Compiled, &CompiledType);
    if (!self) return NULL;
    memset((char *)self + offsetof(Compiled, vectorcall), 0, sizeof(Compiled) - offsetof(Compiled, vectorcall));
    self->vectorcall = call;
    self->kind = kind;
    self->slow = Py_NewRef(slow);
    self->state = Py_NewRef(state);
    self->globals = Py_NewRef(globals);
    self->time_ns = Py_NewRef(time_ns);
    self->get_ident = Py_NewRef(get_ident);
    PyObject_GC_Track(self);
    if (slot_offset(Py_TYPE(state), "sessions_on", &self->o_sessions_on)
        || slot_offset(Py_TYPE(state), "registry", &self->o_registry)
        || slot_offset(Py_TYPE(state), "policy_version", &self->o_version)) {
        Py_DECREF(self);
        return NULL;
    }
    return self;
}

/* session_event(slow, state, methods, globals) */
static PyObject *new_event(PyObject *module, PyObject *args) {
    PyObject *slow, *state, *methods, *globals;
    if (!PyArg_ParseTuple(args, "OOO!O!:session_event", &slow, &state, &PyDict_Type, &methods, &PyDict_Type, &globals))
        return NULL;
    Compiled *self = make(EVENT, slow, state, globals);
    if (self) self->methods = Py_NewRef(methods);
    return (PyObject *)self;
}

/* register_task(slow, state, globals) */
static PyObject *new_register_task(PyObject *module, PyObject *args) {
    PyObject *slow, *state, *globals;
    if (!PyArg_ParseTuple(args, "OOO!:register_task", &slow, &state, &PyDict_Type, &globals)) return NULL;
    return (PyObject *)make(REGISTER_TASK, slow, state, globals);
}

/* register_session(slow, state, globals) */
static PyObject *new_register(PyObject *module, PyObject *args) {
    PyObject *slow, *state, *globals;
    if (!PyArg_ParseTuple(args, "OOO!:register_session", &slow, &state, &PyDict_Type, &globals)) return NULL;
    PyObject *getrandbits = PyDict_GetItemWithError(globals, s_getrandbits);
    if (!getrandbits) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_KeyError, "getrandbits");
    Compiled *self = make(REGISTER, slow, state, globals);
    if (self) self->getrandbits = Py_NewRef(getrandbits);
    return (PyObject *)self;
}

#define EACH_REF(F) \
    F(slow) F(state) F(methods) F(globals) F(time_ns) F(getrandbits) F(get_ident) F(dict) F(registry) \
    F(sessions) F(options) F(tasks) F(session_ids) F(pipeline) F(max_pending)

static int traverse(Compiled *self, visitproc visit, void *arg) {
#define VISIT(f) Py_VISIT(self->f);
    EACH_REF(VISIT)
#undef VISIT
    return 0;
}

static int clear(Compiled *self) {
#define CLEAR(f) Py_CLEAR(self->f);
    EACH_REF(CLEAR)
#undef CLEAR
    return 0;
}

static void dealloc(Compiled *self) {
    PyObject_GC_UnTrack(self);
    clear(self);
    PyObject_GC_Del(self);
}

static PyGetSetDef getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject CompiledType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "otel_rl._internal.recording._tracking.Compiled",
    .tp_basicsize = sizeof(Compiled),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A session call with its common case compiled (see the module's source).",
    .tp_dealloc = (destructor)dealloc,
    .tp_traverse = (traverseproc)traverse,
    .tp_clear = (inquiry)clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Compiled, vectorcall),
    .tp_dictoffset = offsetof(Compiled, dict),
    .tp_getset = getset,
};

static PyMethodDef methods[] = {
    {"configure", configure, METH_O, "Sets tracking.py's classes, keys and record layout the three paths use."},
    {"session_record", (PyCFunction)(void (*)(void))session_record, METH_FASTCALL,
     "A plain finalized session's record, as SessionState.record builds it; None for any other."},
    {"finalize_task_sessions", (PyCFunction)(void (*)(void))finalize_task_sessions, METH_FASTCALL,
     "Registry.finalize_task's sessions, finalized the plain way; False (nothing changed) for any other."},
    {"session_event", new_event, METH_VARARGS,
     "session_event(slow, state, methods, globals): trace_session_event, its marks compiled."},
    {"register_task", new_register_task, METH_VARARGS,
     "register_task(slow, state, globals): register_task, compiled for a task that starts a trace of its own."},
    {"register_session", new_register, METH_VARARGS,
     "register_session(slow, state, globals): register_session, compiled for a known task."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tracking", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tracking(void) {
    if (PyType_Ready(&CompiledType) < 0) return NULL;
    PyObject *thread_module = PyImport_ImportModule("_thread");
    lock_type = thread_module ? (PyTypeObject *)PyObject_GetAttrString(thread_module, "LockType") : NULL;
    Py_XDECREF(thread_module);
    if (!lock_type || !PyType_Check(lock_type)) return NULL;
#define INTERN(var, text) if (!(var = PyUnicode_InternFromString(text))) return NULL;
    INTERN(s_session_id, "session_id")
    INTERN(s_phase_options, "phase_options")
    INTERN(s_sessions, "sessions")
    INTERN(s_time_ns, "time_ns")
    INTERN(s_getrandbits, "getrandbits")
    INTERN(s_get_ident, "get_ident")
    INTERN(s_new_span_id, "new_span_id")
    INTERN(s_tasks, "tasks")
    INTERN(s_session_ids, "_session_ids")
    INTERN(s_pipeline, "_pipeline")
    INTERN(s_max_pending, "_max_pending")
    INTERN(s_lock, "_lock")
    INTERN(s_acquire, "acquire")
    INTERN(s_get, "get")
    INTERN(s_release, "release")
    INTERN(s_enqueue, "enqueue")
    INTERN(s_finalized, "_finalized")
    INTERN(s_recent, "recent")
    INTERN(s_idle, "_idle")
    INTERN(s_end_idle_tasks, "end_idle_tasks")
    INTERN(s_queue, "queue")
    INTERN(s_max_queue_size, "max_queue_size")
    INTERN(s_wake_at, "wake_at")
    INTERN(s_wake, "wake")
    INTERN(s_set, "set")
    INTERN(s_append, "append")
    INTERN(s_mark_finalized, "mark_finalized")
    INTERN(s_task_id, "task_id")
    INTERN(s_status, "status")
    INTERN(s_current_id, "current_id")
    INTERN(s_end_task, "_end_task")
    INTERN(s_pop, "pop")
    INTERN(s_span_clock, "_time_ns")
    INTERN(s_report, "_report_compiled_error")
    INTERN(s_get_ident_span, "_get_ident")
    INTERN(s_default_sampling, "_default_sampling")
    INTERN(s_task_name, "task")
    INTERN(s_task_ids, "_task_ids")
#undef INTERN
    if (!(bits64 = PyLong_FromLong(64)) || !(one = PyLong_FromLong(1)) || !(zero_int = PyLong_FromLong(0))) return NULL;
    return PyModule_Create(&module);
}
