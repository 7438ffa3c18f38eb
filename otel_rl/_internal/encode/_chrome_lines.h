/* What _chrome_lines hands the placement module as a capsule (its API attribute): complete()
 * called from C, without a Python call and the duration's float object for each line. */
#ifndef OTEL_RL_CHROME_LINES_H
#define OTEL_RL_CHROME_LINES_H

#define CHROME_LINES_API "otel_rl._internal.encode._chrome_lines.API"

typedef struct {
    /* complete(rec, attrs, cat, ts, dur, pid, tid, trace_text) with dur a double */
    PyObject *(*complete)(PyObject *rec, PyObject *attrs, PyObject *cat, PyObject *ts, double dur, PyObject *pid,
                          PyObject *tid, PyObject *trace);
} ChromeLinesAPI;

#endif
