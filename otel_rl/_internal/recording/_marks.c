/* The compiled twin of trace_session_event's fast path (sessions.py): a phase mark for a known,
 * open session.
 *
 * In Python that path costs a session about 19,000 instructions for its four marks (a call with
 * **payload, a dozen attribute and dict lookups, two clock reads, two tuples): a quarter of
 * what the training thread pays for a session. SessionEvent is a callable with the Python
 * function's signature that does the same steps on the same objects:
 *
 *   mark_<phase>_start: (phase, time_ns(), get_ident(), None, STATE.policy_version) appended to
 *     the session's open_phases;
 *   mark_<phase>_end, the phase opened last: that tuple popped, and (phase, start, time_ns(),
 *     thread, None, None, version) appended to the session's done list.
 *
 * Anything else (a payload, a method not parsed yet, an unknown session, registered phase
 * options, an end that is not the latest phase, a value of an unexpected type) goes, unchanged,
 * to the Python function, before anything here has changed: it keeps every other behaviour and
 * its guard. Slots of STATE and SessionState are read through their member descriptors'
 * offsets, found once when the callable is made.
 */
#include "../_cext.h"
#include <structmember.h>
#include <time.h>
#include <pythread.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *slow;     /* the Python trace_session_event */
    PyObject *state;    /* STATE */
    PyObject *methods;  /* method -> (phase, is_start) or (), as the Python path fills it */
    /* The Python function's globals and the time_ns they held when this was made: the clock
     * is read there at each mark, so a stand-in clock (the tests' fake one) reads both paths. */
    PyObject *globals, *time_ns;
    PyObject *dict;     /* __doc__, __name__, __wrapped__... */
    /* The last registry seen and its sessions and phase_options: a registry keeps both objects
     * for its life (it changes what they hold, never the attributes), so they are looked up
     * once per configuration. Held until the next configuration's first mark. */
    PyObject *registry, *sessions, *options;
    PyTypeObject *session_type;
    Py_ssize_t o_sessions_on, o_registry, o_version, o_open, o_done;
} SessionEvent;

static PyObject *s_session_id, *s_phase_options, *s_sessions, *s_time_ns;

static PyObject *clock_ns(SessionEvent *self) {  /* time_ns() as the Python function reads it */
    PyObject *clock = PyDict_GetItemWithError(self->globals, s_time_ns);
    if (clock != self->time_ns) {
        if (!clock) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_NameError, "time_ns");
        return PyObject_CallNoArgs(clock);
    }
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* 1 done here, 0 for the Python function (nothing changed), -1 an error. */
static int fast(SessionEvent *self, PyObject *method, PyObject *session_id) {
    PyObject *on = SLOT(self->state, self->o_sessions_on);
    if (on == Py_False) return 1;  /* `if not STATE.sessions_on: return` */
    if (on != Py_True) return 0;
    PyObject *parsed = PyDict_GetItemWithError(self->methods, method);
    if (!parsed || !PyTuple_CheckExact(parsed) || PyTuple_GET_SIZE(parsed) != 2) return PyErr_Occurred() ? -1 : 0;
    PyObject *phase = PyTuple_GET_ITEM(parsed, 0), *start = PyTuple_GET_ITEM(parsed, 1);
    PyObject *registry = SLOT(self->state, self->o_registry);
    if (!registry || registry == Py_None) return 0;
    if (registry != self->registry) {
        PyObject *sessions = PyObject_GetAttr(registry, s_sessions), *options = NULL;
        if (!sessions || !(options = PyObject_GetAttr(registry, s_phase_options))
            || !PyDict_Check(sessions) || !PyDict_Check(options)) {  /* OrderedDict is a dict underneath */
            Py_XDECREF(sessions);
            Py_XDECREF(options);
            return PyErr_Occurred() ? -1 : 0;
        }
        Py_XSETREF(self->registry, Py_NewRef(registry));
        Py_XSETREF(self->sessions, sessions);
        Py_XSETREF(self->options, options);
    }
    if (PyDict_GET_SIZE(self->options)) return 0;  /* registered phases: overlap checks */
    PyObject *state = Py_XNewRef(PyDict_GetItemWithError(self->sessions, session_id));
    if (!state) return PyErr_Occurred() ? -1 : 0;
    int r = 0;
    PyObject *phases = Py_TYPE(state) == self->session_type ? SLOT(state, self->o_open) : NULL;
    if (!phases || !PyList_CheckExact(phases)) goto done;
    if (start == Py_True) {
        PyObject *version = SLOT(self->state, self->o_version);
        PyObject *now = clock_ns(self), *thread = now ? PyLong_FromUnsignedLong(PyThread_get_thread_ident()) : NULL;
        PyObject *opened = thread ? PyTuple_Pack(5, phase, now, thread, Py_None, version ? version : Py_None) : NULL;
        Py_XDECREF(now);
        Py_XDECREF(thread);
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
    PyObject *done_list = SLOT(state, self->o_done);
    if (!done_list || !PyList_CheckExact(done_list)) goto done;
    PyObject *now = clock_ns(self);
    if (!now) { r = -1; goto done; }
    /* SessionState.end_marked: (name, start, end, thread, args, interrupted, version) */
    PyObject *ended = PyTuple_Pack(7, PyTuple_GET_ITEM(last, 0), PyTuple_GET_ITEM(last, 1), now,
                                   PyTuple_GET_ITEM(last, 2), PyTuple_GET_ITEM(last, 3), Py_None,
                                   PyTuple_GET_ITEM(last, 4));
    Py_DECREF(now);
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

static PyObject *call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    SessionEvent *self = (SessionEvent *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    /* The shape of the fast path: (method, session_id=...) or (method, session_id). */
    PyObject *session_id = NULL;
    if (nargs == 1 && kwnames && PyTuple_GET_SIZE(kwnames) == 1) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
        if (name == s_session_id || PyUnicode_Compare(name, s_session_id) == 0) session_id = args[1];
    } else if (nargs == 2 && !kwnames) {
        session_id = args[1];
    }
    if (session_id && session_id != Py_None && PyUnicode_CheckExact(args[0])) {
        int r = fast(self, args[0], session_id);
        if (r > 0) Py_RETURN_NONE;
        if (r < 0) PyErr_Clear();  /* the Python path does it again, under its guard */
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static int take_offset(PyTypeObject *cls, const char *name, Py_ssize_t *off) {
    PyObject *d = PyDict_GetItemString(cls->tp_dict, name);
    if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type) || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", cls->tp_name, name);
        return -1;
    }
    *off = ((PyMemberDescrObject *)d)->d_member->offset;
    return 0;
}

/* SessionEvent(slow, state, methods, session_type, globals): globals["time_ns"] is time.time_ns */
static PyObject *new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *slow, *state, *methods, *globals;
    PyTypeObject *session_type;
    if (!PyArg_ParseTuple(args, "OOO!O!O!:SessionEvent", &slow, &state, &PyDict_Type, &methods, &PyType_Type,
                          &session_type, &PyDict_Type, &globals))
        return NULL;
    PyObject *time_ns = PyDict_GetItemWithError(globals, s_time_ns);
    if (!time_ns) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_KeyError, "time_ns");
    SessionEvent *self = (SessionEvent *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->vectorcall = call;
    self->slow = Py_NewRef(slow);
    self->state = Py_NewRef(state);
    self->methods = Py_NewRef(methods);
    self->globals = Py_NewRef(globals);
    self->time_ns = Py_NewRef(time_ns);
    self->session_type = (PyTypeObject *)Py_NewRef(session_type);
    if (take_offset(Py_TYPE(state), "sessions_on", &self->o_sessions_on)
        || take_offset(Py_TYPE(state), "registry", &self->o_registry)
        || take_offset(Py_TYPE(state), "policy_version", &self->o_version)
        || take_offset(session_type, "open_phases", &self->o_open) || take_offset(session_type, "done", &self->o_done)) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int traverse(SessionEvent *self, visitproc visit, void *arg) {
    Py_VISIT(self->slow);
    Py_VISIT(self->state);
    Py_VISIT(self->methods);
    Py_VISIT(self->globals);
    Py_VISIT(self->time_ns);
    Py_VISIT(self->dict);
    Py_VISIT(self->session_type);
    Py_VISIT(self->registry);
    Py_VISIT(self->sessions);
    Py_VISIT(self->options);
    return 0;
}

static int clear(SessionEvent *self) {
    Py_CLEAR(self->slow);
    Py_CLEAR(self->state);
    Py_CLEAR(self->methods);
    Py_CLEAR(self->globals);
    Py_CLEAR(self->time_ns);
    Py_CLEAR(self->dict);
    Py_CLEAR(self->session_type);
    Py_CLEAR(self->registry);
    Py_CLEAR(self->sessions);
    Py_CLEAR(self->options);
    return 0;
}

static void dealloc(SessionEvent *self) {
    PyObject_GC_UnTrack(self);
    clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject SessionEventType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "otel_rl._internal.recording._marks.SessionEvent",
    .tp_basicsize = sizeof(SessionEvent),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "trace_session_event with its phase marks compiled (see the module's source).",
    .tp_new = new,
    .tp_dealloc = (destructor)dealloc,
    .tp_traverse = (traverseproc)traverse,
    .tp_clear = (inquiry)clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SessionEvent, vectorcall),
    .tp_dictoffset = offsetof(SessionEvent, dict),
    .tp_getset = getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_marks", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__marks(void) {
    if (PyType_Ready(&SessionEventType) < 0) return NULL;
    s_session_id = PyUnicode_InternFromString("session_id");
    s_phase_options = PyUnicode_InternFromString("phase_options");
    s_sessions = PyUnicode_InternFromString("sessions");
    s_time_ns = PyUnicode_InternFromString("time_ns");
    if (!s_session_id || !s_phase_options || !s_sessions || !s_time_ns) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "SessionEvent", (PyObject *)&SessionEventType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
