/* SIGTERM taken at the C level and handed to a thread through a pipe.
 *
 * A Python signal handler runs only on the main thread, between bytecodes. A signal that
 * arrives just before the main thread blocks in C (a multiprocessing worker entering its task
 * queue's semaphore as Pool.terminate() signals it), or that the kernel hands to another
 * thread while the main one sleeps, trips Python's flag and is never acted on: the process
 * that SIG_DFL would have killed lives on and its parent waits on it forever. Here the
 * handler writes the signal's number to a non-blocking pipe (async-signal-safe), and a
 * watcher thread reads it and runs the bounded shutdown, whatever the main thread is doing.
 *
 * The handler belongs to the process that installed it: in a forked child, until the child
 * installs its own pipe, it restores the default action and raises the signal again (the
 * parent's watcher must never act on a child's signal).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t write_fd = -1;
static volatile pid_t owner = 0;

static void to_default(int signum) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(signum, &action, NULL);
}

static void on_signal(int signum) {
    int saved = errno;
    if (write_fd >= 0 && getpid() == owner) {
        unsigned char byte = (unsigned char)signum;
        ssize_t ignored = write(write_fd, &byte, 1);  /* a full pipe already holds a wake-up */
        (void)ignored;
    } else {
        to_default(signum);
        raise(signum);
    }
    errno = saved;
}

static PyObject *install(PyObject *mod, PyObject *args) {
    int signum, fd;
    if (!PyArg_ParseTuple(args, "ii", &signum, &fd)) return NULL;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    /* SA_RESTART: the threads it interrupts carry on with their system calls. */
    action.sa_flags = SA_RESTART | SA_ONSTACK;
    /* The handler reads both: with no fd while the owner changes, it takes the default action. */
    write_fd = -1;
    owner = getpid();
    write_fd = fd;
    if (sigaction(signum, &action, NULL) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyObject *installed(PyObject *mod, PyObject *arg) {
    int signum = (int)PyLong_AsLong(arg);
    if (signum == -1 && PyErr_Occurred()) return NULL;
    struct sigaction current;
    if (sigaction(signum, NULL, &current) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    return PyBool_FromLong(current.sa_handler == on_signal);
}

static PyObject *restore_default(PyObject *mod, PyObject *arg) {
    int signum = (int)PyLong_AsLong(arg);
    if (signum == -1 && PyErr_Occurred()) return NULL;
    write_fd = -1;
    to_default(signum);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"install", install, METH_VARARGS,
     "install(signum, fd): the signal's number is written to fd (non-blocking) when it arrives."},
    {"installed", installed, METH_O, "installed(signum): the signal's handler is this module's (inherited by a forked child too)."},
    {"restore_default", restore_default, METH_O, "restore_default(signum): the default action again."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_signals", NULL, -1, methods};

PyMODINIT_FUNC PyInit__signals(void) { return PyModule_Create(&module); }
