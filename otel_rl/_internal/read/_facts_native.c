/* FactsBuilder.add_lines in C: the same facts, the same float operations in the same order.
 *
 * session_facts.FactsBuilder._add_lines is the specification; this file follows it
 * statement by statement (the Python loop costs about 15 us a record, this about 1;
 * parsing the JSON, by the same orjson.loads call, is left as it is). Whatever the
 * Python loop answers False for, or raises, this answers False for or raises too:
 * the caller then reads the block line by line, which names each line it cannot use.
 * Floats are combined exactly as Python does (IEEE doubles, no contraction: setup.py
 * builds this file with -ffp-contract=off), so a report is the same to the last digit
 * whichever loop built it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* Set once by configure(): orjson.loads, session_facts.reason_text, checks.MAX_S,
 * session_facts.UNATTRIBUTED. */
static PyObject *loads_fn = NULL, *reason_text_fn = NULL, *unattributed_name = NULL;
static double max_s = 0.0;

static PyObject *k_session_id, *k_rank, *k_role, *k_status, *k_submit_ts, *k_finalized_ts, *k_total_s,
    *k_step, *k_phases, *k_counters, *k_task_id, *k_span_id, *k_trace_id, *k_start_ts, *k_end_ts,
    *k_global_step, *k_reason, *k_line, *k_seen, *k_add;

static const char OPEN_MARK[] = "\"end_ts\":null";

typedef struct {
    double s, e;
} Pair;

typedef struct {
    Pair *items;
    Py_ssize_t n, cap;
} Pairs;

static int pairs_push(Pairs *p, double s, double e) {
    if (p->n == p->cap) {
        Py_ssize_t cap = p->cap ? p->cap * 2 : 16;
        Pair *items = PyMem_Realloc(p->items, (size_t)cap * sizeof(Pair));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        p->items = items;
        p->cap = cap;
    }
    p->items[p->n].s = s;
    p->items[p->n].e = e;
    p->n++;
    return 0;
}

/* Python's order of (start, end) tuples: by start, then end (no NaN reaches here). */
static int pair_cmp(const void *a, const void *b) {
    const Pair *x = a, *y = b;
    if (x->s < y->s) return -1;
    if (x->s > y->s) return 1;
    if (x->e < y->e) return -1;
    if (x->e > y->e) return 1;
    return 0;
}

/* session_facts.covered_length over more than one pair (sorts them in place). */
static double covered_length(Pair *items, Py_ssize_t n) {
    qsort(items, (size_t)n, sizeof(Pair), pair_cmp);
    double total = 0.0, cur_s = items[0].s, cur_e = items[0].e;
    for (Py_ssize_t i = 0; i < n; i++) {
        double s = items[i].s, e = items[i].e;
        if (s > cur_e) {
            total += cur_e - cur_s;
            cur_s = s;
            cur_e = e;
        } else if (e > cur_e) {
            cur_e = e;
        }
    }
    return total + cur_e - cur_s;
}

#include "_facts_scan.h"

/* table[key] as an int, added as len(table) when missing (a new reference). */
static PyObject *index_of(PyObject *table, PyObject *key) {
    PyObject *found = PyDict_GetItemWithError(table, key);
    if (found != NULL) {
        Py_INCREF(found);
        return found;
    }
    if (PyErr_Occurred()) return NULL;
    PyObject *n = PyLong_FromSsize_t(PyDict_GET_SIZE(table));
    if (n == NULL || PyDict_SetItem(table, key, n) < 0) {
        Py_XDECREF(n);
        return NULL;
    }
    return n;
}

/* table[key].append(value), table[key] made [] when missing; steals value. */
static int append_to(PyObject *table, PyObject *key, PyObject *value) {
    if (value == NULL) return -1;
    PyObject *values = PyDict_GetItemWithError(table, key);
    if (values == NULL) {
        if (PyErr_Occurred()) goto fail;
        PyObject *fresh = PyList_New(0);
        if (fresh == NULL) goto fail;
        int bad = PyDict_SetItem(table, key, fresh);
        Py_DECREF(fresh);
        if (bad < 0) goto fail;
        values = fresh;
    }
    int bad = PyList_Append(values, value);
    Py_DECREF(value);
    return bad;
fail:
    Py_DECREF(value);
    return -1;
}

/* table[key] = table.get(key, 0) + 1 */
static int count(PyObject *table, PyObject *key) {
    PyObject *old = PyDict_GetItemWithError(table, key);
    long long n = 0;
    if (old != NULL) {
        n = PyLong_AsLongLong(old);
        if (n == -1 && PyErr_Occurred()) return -1;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *value = PyLong_FromLongLong(n + 1);
    if (value == NULL) return -1;
    int bad = PyDict_SetItem(table, key, value);
    Py_DECREF(value);
    return bad;
}

/* (a, b) as a tuple of new ints / borrowed objects. */
static PyObject *key2(PyObject *a, Py_ssize_t b) {
    PyObject *n = PyLong_FromSsize_t(b);
    if (n == NULL) return NULL;
    PyObject *t = PyTuple_Pack(2, a, n);
    Py_DECREF(n);
    return t;
}

static int is_id_type(PyObject *v) {
    return v == Py_None || PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v)
        || PyBool_Check(v);
}

static int in_range(PyObject *v, double *out) {
    if (!PyFloat_CheckExact(v)) return 0;
    double x = PyFloat_AS_DOUBLE(v);
    *out = x;
    return -max_s < x && x < max_s;
}

/* The per-step group [durations, opened, with_phase, shares, unattributed, totals]. */
static PyObject *step_group(PyObject *phase, PyObject *sp) {
    PyObject *g = PyDict_GetItemWithError(phase, sp);
    if (g != NULL || PyErr_Occurred()) return g;
    g = Py_BuildValue("[{}{}{}{}[][]]");
    if (g == NULL) return NULL;
    int bad = PyDict_SetItem(phase, sp, g);
    Py_DECREF(g);
    return bad < 0 ? NULL : g;
}

typedef struct {
    PyObject *builder, *keys, *statuses, *steps, *reasons, *phase, *dgroups, *tokens_by, *turns, *bycount,
        *turn, *careful, *tokens_of, *counter_names;
    /* The builder's list columns (appended to as records are taken; lines: NULL unless kept)... */
    PyObject *col_submit, *col_finals, *ids, *tasks, *span_ids, *lines;
    /* ...and its array columns, gathered here and handed over by flush_rows. */
    unsigned short *keys_buf, *status_buf;
    double *finalized_buf, *total_buf, *ready_buf;
    Py_ssize_t nrows, rows_cap;
} State;

static int rows_push(State *st, PyObject *k, PyObject *stx, double finalized, double total, double ready) {
    long kv = PyLong_AsLong(k), sv = PyLong_AsLong(stx);
    if ((kv == -1 || sv == -1) && PyErr_Occurred()) return -1;
    if (kv < 0 || kv > 65535 || sv < 0 || sv > 65535) {
        PyErr_SetString(PyExc_OverflowError, "unsigned short is greater than maximum"); /* as array("H") says */
        return -1;
    }
    if (st->nrows == st->rows_cap) {
        Py_ssize_t cap = st->rows_cap ? st->rows_cap * 2 : 1024;
        void *bufs[5] = {st->keys_buf, st->status_buf, st->finalized_buf, st->total_buf, st->ready_buf};
        size_t sizes[5] = {sizeof(unsigned short), sizeof(unsigned short), sizeof(double), sizeof(double),
                           sizeof(double)};
        for (int i = 0; i < 5; i++) {
            void *grown = PyMem_Realloc(bufs[i], (size_t)cap * sizes[i]);
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            bufs[i] = grown;
        }
        st->keys_buf = bufs[0], st->status_buf = bufs[1], st->finalized_buf = bufs[2];
        st->total_buf = bufs[3], st->ready_buf = bufs[4];
        st->rows_cap = cap;
    }
    Py_ssize_t i = st->nrows++;
    st->keys_buf[i] = (unsigned short)kv;
    st->status_buf[i] = (unsigned short)sv;
    st->finalized_buf[i] = finalized;
    st->total_buf[i] = total;
    st->ready_buf[i] = ready;
    return 0;
}

/* sessions.response_length(counters) when counter_names are its names: the first of them
 * that counters holds as an int or a float. A new reference (None when none is). */
static PyObject *tokens_in(State *st, PyObject *counters) {
    if (st->counter_names == NULL) return PyObject_CallOneArg(st->tokens_of, counters);
    Py_ssize_t n = PyTuple_GET_SIZE(st->counter_names);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyDict_GetItemWithError(counters, PyTuple_GET_ITEM(st->counter_names, i));
        if (value == NULL) {
            if (PyErr_Occurred()) return NULL;
            continue;
        }
        if (PyFloat_CheckExact(value) || PyLong_CheckExact(value)) {
            Py_INCREF(value);
            return value;
        }
    }
    Py_RETURN_NONE;
}

/* Status codes of one record. */
enum { REC_OK = 0, REC_FALSE = 1, REC_ERROR = -1 };

/* The array columns gathered so far, handed to FactsBuilder._flush_columns. */
static int flush_rows(State *st) {
    if (st->nrows == 0) return 0;
    Py_ssize_t n = st->nrows;
    PyObject *r = PyObject_CallMethod(
        st->builder, "_flush_columns", "y#y#y#y#y#", (const char *)st->keys_buf, n * (Py_ssize_t)sizeof(unsigned short),
        (const char *)st->status_buf, n * (Py_ssize_t)sizeof(unsigned short), (const char *)st->finalized_buf,
        n * (Py_ssize_t)sizeof(double), (const char *)st->total_buf, n * (Py_ssize_t)sizeof(double),
        (const char *)st->ready_buf, n * (Py_ssize_t)sizeof(double));
    Py_XDECREF(r);
    st->nrows = 0;
    return r == NULL ? -1 : 0;
}

/* A record the loop does not take: FactsBuilder.add(*careful(rec), line=line). */
static int add_carefully(State *st, PyObject *rec, PyObject *line) {
    if (flush_rows(st) < 0) return -1;
    PyObject *args = PyObject_CallOneArg(st->careful, rec);
    if (args == NULL) return -1;
    PyObject *tuple = PySequence_Tuple(args);
    Py_DECREF(args);
    if (tuple == NULL) return -1;
    PyObject *add = PyObject_GetAttr(st->builder, k_add);
    PyObject *kwargs = add ? Py_BuildValue("{OO}", k_line, line) : NULL;
    PyObject *r = kwargs ? PyObject_Call(add, tuple, kwargs) : NULL;
    Py_XDECREF(add);
    Py_XDECREF(kwargs);
    Py_DECREF(tuple);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* The phases of a record read by orjson: names in order, pairs pushed; REC_FALSE for what the
 * Python loop cannot use (it raises, or its bulk check of the times at the end fails). */
static int phases_from_dict(PyObject *phases, Rec *r, Pairs *spans) {
    PyObject *name, *instances;
    Py_ssize_t pos = 0;
    while (PyDict_Next(phases, &pos, &name, &instances)) {
        if (!PyList_CheckExact(instances)) return REC_FALSE;
        Py_ssize_t m = PyList_GET_SIZE(instances), first = spans->n;
        for (Py_ssize_t j = 0; j < m; j++) {
            PyObject *one = PyList_GET_ITEM(instances, j);
            if (!PyDict_CheckExact(one)) return REC_FALSE;
            PyObject *s = PyDict_GetItemWithError(one, k_start_ts);
            PyObject *e = s ? PyDict_GetItemWithError(one, k_end_ts) : NULL;
            double sv, ev;
            if (e == NULL) return PyErr_Occurred() ? REC_ERROR : REC_FALSE; /* Python: KeyError */
            if (!in_range(s, &sv) || !in_range(e, &ev)) return REC_FALSE;
            if (pairs_push(spans, sv, ev) < 0) return REC_ERROR;
        }
        if (rec_phase(r, name, first, m) < 0) return REC_ERROR;
    }
    return REC_OK;
}

/* Everything after the record's fields were found usable (spans holds its phases' pairs). */
static int add_record(State *st, Rec *r, PyObject *line, Pairs *spans, int *seen, PyObject **last_sp,
                      PyObject **g) {
    PyObject *status = r->status, *submit = r->submit, *finalized = r->finalized, *total = r->total;
    double total_v = PyFloat_AS_DOUBLE(total);
    int rc = REC_ERROR;
    PyObject *key = NULL, *k = NULL, *stx = NULL, *sp = NULL, *ready = NULL, *why = NULL,
             *reason_str = NULL, *gkey = NULL, *unattributed = NULL;

    if (r->role != Py_None && !PyUnicode_CheckExact(r->role)) return REC_FALSE;
    key = PyLong_CheckExact(r->rank) ? PyTuple_Pack(2, r->rank, r->role) : PyTuple_Pack(2, Py_None, Py_None);
    if (key == NULL || (k = index_of(st->keys, key)) == NULL) goto done;
    stx = PyDict_GetItemWithError(st->statuses, status);
    if (stx != NULL) {
        Py_INCREF(stx);
    } else {
        if (PyErr_Occurred()) goto done;
        PyObject *name = status;
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        stx = PyLong_FromSsize_t(PyDict_GET_SIZE(st->statuses));
        int bad = stx == NULL || PyDict_SetItem(st->statuses, name, stx) < 0;
        Py_DECREF(name);
        if (bad) goto done;
    }
    PyObject *step = r->step;
    if (step == Py_None) step = r->global_step ? r->global_step : Py_None;
    if (!PyLong_CheckExact(step)) step = Py_None;
    if ((sp = index_of(st->steps, step)) == NULL) goto done;
    PyObject *reason = r->reason;
    if (reason != NULL && reason != Py_None) {
        if (PyUnicode_CheckExact(reason)) {
            reason_str = reason;
            Py_INCREF(reason_str);
        } else if ((reason_str = PyObject_CallOneArg(reason_text_fn, reason)) == NULL) {
            goto done;
        }
        why = PyTuple_Pack(2, status, reason_str);
        if (why == NULL || count(st->reasons, why) < 0) goto done;
    }
    if (*last_sp == NULL || PyObject_RichCompareBool(sp, *last_sp, Py_NE) == 1) {
        if ((*g = step_group(st->phase, sp)) == NULL) goto done;
        Py_XDECREF(*last_sp);
        *last_sp = sp;
        Py_INCREF(sp);
    }
    PyObject *durations = PyList_GET_ITEM(*g, 0), *with_phase = PyList_GET_ITEM(*g, 2),
             *shares = PyList_GET_ITEM(*g, 3), *unattr = PyList_GET_ITEM(*g, 4), *totals = PyList_GET_ITEM(*g, 5);
    int positive = total_v > 0;
    Py_ssize_t inst_at = 0, inst_n = 0;
    for (Py_ssize_t i = 0; i < r->nphases; i++) {
        PyObject *name = r->phases[i].name;
        Py_ssize_t first = r->phases[i].first, m = r->phases[i].n;
        if (m == 0) continue;
        if (PyUnicode_CheckExact(name) && PyUnicode_CheckExact(st->turn) && PyUnicode_Compare(name, st->turn) == 0) {
            inst_at = first;
            inst_n = m;
        }
        double d;
        if (m == 1) {
            d = spans->items[first].e - spans->items[first].s;
            if (append_to(durations, name, PyFloat_FromDouble(d)) < 0) goto done;
            d = 0.0 + d;
        } else {
            d = 0.0;
            for (Py_ssize_t j = first; j < first + m; j++) {
                double x = spans->items[j].e - spans->items[j].s;
                if (append_to(durations, name, PyFloat_FromDouble(x)) < 0) goto done;
                d += x;
            }
        }
        if (count(with_phase, name) < 0) goto done;
        if (positive && append_to(shares, name, PyFloat_FromDouble(d / total_v)) < 0) goto done;
    }
    if (PyList_Append(totals, total) < 0) goto done;
    double unattributed_v;
    if (spans->n) {
        if (spans->n == 1) {
            unattributed_v = total_v - (spans->items[0].e - spans->items[0].s);
        } else {
            /* covered_length sorts; the turn's pairs are taken before, in their own order. */
            Pair *copy = PyMem_Malloc((size_t)spans->n * sizeof(Pair));
            if (copy == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            memcpy(copy, spans->items, (size_t)spans->n * sizeof(Pair));
            unattributed_v = total_v - covered_length(copy, spans->n);
            PyMem_Free(copy);
        }
        if (unattributed_v < 0.0) unattributed_v = 0.0;
        double most = spans->items[0].e;
        for (Py_ssize_t j = 1; j < spans->n; j++)
            if (spans->items[j].e > most) most = spans->items[j].e;
        ready = PyFloat_FromDouble(most);
    } else {
        unattributed_v = total_v;
        ready = finalized;
        Py_INCREF(ready);
    }
    if (ready == NULL) goto done;
    if (rows_push(st, k, stx, PyFloat_AS_DOUBLE(finalized), total_v, PyFloat_AS_DOUBLE(ready)) < 0
        || PyList_Append(st->col_submit, submit) < 0 || PyList_Append(st->col_finals, finalized) < 0
        || PyList_Append(st->ids, r->sid) < 0 || PyList_Append(st->tasks, r->task_id) < 0
        || PyList_Append(st->span_ids, r->span_id) < 0 || (st->lines && PyList_Append(st->lines, line) < 0))
        goto done;
    unattributed = PyFloat_FromDouble(unattributed_v);
    if (unattributed == NULL || PyList_Append(unattr, unattributed) < 0) goto done;
    if (positive && append_to(shares, unattributed_name, PyFloat_FromDouble(unattributed_v / total_v)) < 0)
        goto done;
    gkey = PyTuple_Pack(3, sp, k, stx);
    if (gkey == NULL) goto done;
    PyObject *group = PyDict_GetItemWithError(st->dgroups, gkey);
    if (group == NULL) {
        if (PyErr_Occurred()) goto done;
        group = Py_BuildValue("[[][][][]]");
        if (group == NULL) goto done;
        int bad = PyDict_SetItem(st->dgroups, gkey, group);
        Py_DECREF(group);
        if (bad < 0) goto done;
    }
    PyObject *lifetime = PyFloat_FromDouble(PyFloat_AS_DOUBLE(finalized) - PyFloat_AS_DOUBLE(submit));
    if (lifetime == NULL || PyList_Append(PyList_GET_ITEM(group, 0), submit) < 0
        || PyList_Append(PyList_GET_ITEM(group, 1), finalized) < 0
        || PyList_Append(PyList_GET_ITEM(group, 2), total) < 0
        || PyList_Append(PyList_GET_ITEM(group, 3), lifetime) < 0) {
        Py_XDECREF(lifetime);
        goto done;
    }
    Py_DECREF(lifetime);
    if (r->tokens != NULL) {
        PyObject *tok = PyDict_GetItemWithError(st->tokens_by, sp);
        if (tok == NULL && !PyErr_Occurred()) {
            tok = Py_BuildValue("[[][]]");
            if (tok != NULL) {
                int bad = PyDict_SetItem(st->tokens_by, sp, tok);
                Py_DECREF(tok);
                if (bad < 0) tok = NULL;
            }
        }
        PyObject *as_float = tok ? PyNumber_Float(r->tokens) : NULL;
        int bad = as_float == NULL || PyList_Append(PyList_GET_ITEM(tok, 0), as_float) < 0
            || PyList_Append(PyList_GET_ITEM(tok, 1), total) < 0;
        Py_XDECREF(as_float);
        if (bad) goto done;
    }
    PyObject *ckey = key2(sp, inst_n);
    if (ckey == NULL) goto done;
    Py_INCREF(total);
    int bad = append_to(st->bycount, ckey, total);
    Py_DECREF(ckey);
    if (bad < 0) goto done;
    if (inst_n) {
        *seen = 1;
        Pair *inst = spans->items + inst_at;
        if (inst_n > 1) qsort(inst, (size_t)inst_n, sizeof(Pair), pair_cmp);
        for (Py_ssize_t t = 0; t < inst_n; t++) {
            PyObject *tkey = key2(sp, t + 1);
            if (tkey == NULL) goto done;
            bad = append_to(st->turns, tkey, PyFloat_FromDouble(inst[t].e - inst[t].s));
            Py_DECREF(tkey);
            if (bad < 0) goto done;
        }
    }
    rc = REC_OK;
done:
    Py_XDECREF(key);
    Py_XDECREF(k);
    Py_XDECREF(stx);
    Py_XDECREF(sp);
    Py_XDECREF(ready);
    Py_XDECREF(why);
    Py_XDECREF(reason_str);
    Py_XDECREF(gkey);
    Py_XDECREF(unattributed);
    return rc;
}

/* One line read by orjson.loads, as the Python loop reads it; *ids_ok cleared for an id it refuses. */
static int add_parsed(State *st, PyObject *line, Rec *r, Pairs *spans, int open_phases, int *ids_ok, int *seen,
                      PyObject **last_sp, PyObject **g) {
    static PyObject **const keys[] = {&k_session_id, &k_rank, &k_role, &k_status, &k_submit_ts, &k_finalized_ts,
                                      &k_total_s, &k_step, &k_phases, &k_counters, &k_task_id, &k_span_id,
                                      &k_trace_id};
    PyObject *rec = PyObject_CallOneArg(loads_fn, line);
    if (rec == NULL) return REC_ERROR; /* a JSONDecodeError is a ValueError: the caller answers False */
    if (!PyDict_CheckExact(rec)) {
        Py_DECREF(rec);
        return REC_FALSE; /* Python: itemgetter over a non-dict raises TypeError */
    }
    PyObject *f[13];
    int complete = 1, rc = REC_ERROR;
    for (int j = 0; j < 13; j++) {
        f[j] = PyDict_GetItemWithError(rec, *keys[j]);
        if (f[j] == NULL) {
            if (PyErr_Occurred()) goto done;
            complete = 0;
            break;
        }
    }
    int ok = 0;
    if (complete) {
        if (!is_id_type(f[0]) || !is_id_type(f[10]) || !is_id_type(f[11]) || !is_id_type(f[12])) *ids_ok = 0;
        double v;
        ok = in_range(f[4], &v) && in_range(f[5], &v) && in_range(f[6], &v) && PyDict_CheckExact(f[8])
            && PyUnicode_CheckExact(f[3]) && PyUnicode_GET_LENGTH(f[3]) > 0;
        if (ok && open_phases && PyBytes_Check(line)
            && memmem(PyBytes_AS_STRING(line), (size_t)PyBytes_GET_SIZE(line), OPEN_MARK, sizeof(OPEN_MARK) - 1)
                   != NULL)
            ok = 0;
    }
    if (!ok) {
        rc = add_carefully(st, rec, line) < 0 ? REC_ERROR : REC_OK;
        goto done;
    }
    if (f[2] != Py_None && !PyUnicode_CheckExact(f[2])) {
        rc = REC_FALSE;
        goto done;
    }
    r->sid = f[0], r->rank = f[1], r->role = f[2], r->status = f[3], r->submit = f[4], r->finalized = f[5];
    r->total = f[6], r->step = f[7], r->task_id = f[10], r->span_id = f[11];
    if ((r->global_step = PyDict_GetItemWithError(rec, k_global_step)) == NULL && PyErr_Occurred()) goto done;
    if ((r->reason = PyDict_GetItemWithError(rec, k_reason)) == NULL && PyErr_Occurred()) goto done;
    if ((rc = phases_from_dict(f[8], r, spans)) != REC_OK) goto done;
    rc = REC_ERROR;
    if (PyDict_CheckExact(f[9]) && PyDict_GET_SIZE(f[9])) {
        PyObject *tokens = tokens_in(st, f[9]);
        if (tokens == NULL) goto done;
        if (tokens == Py_None) Py_DECREF(tokens);
        else r->tokens = tokens;
    }
    rc = add_record(st, r, line, spans, seen, last_sp, g);
done:
    Py_DECREF(rec);
    return rc;
}

static PyObject *get_attr(PyObject *obj, const char *name) {
    return PyObject_GetAttrString(obj, name);
}

static PyObject *add_lines(PyObject *self, PyObject *args) {
    State st = {0};
    PyObject *lines;
    int open_phases;
    PyObject *counter_names = Py_None;
    if (!PyArg_ParseTuple(args, "OO!OOp|O", &st.builder, &PyList_Type, &lines, &st.careful, &st.tokens_of,
                          &open_phases, &counter_names))
        return NULL;
    if (counter_names != Py_None) {
        if (!PyTuple_CheckExact(counter_names)) {
            PyErr_SetString(PyExc_TypeError, "counter_names must be a tuple");
            return NULL;
        }
        st.counter_names = counter_names;
    }
    if (loads_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_facts_native.configure() was not called");
        return NULL;
    }
    PyObject *result = NULL, *last_sp = NULL, *g = NULL;
    Pairs spans = {0};
    Rec rec = {0};
    int seen = 0, ids_ok = 1;
    enum { TABLES = 9, SLOTS = 16 };
    const char *names[SLOTS] = {"keys", "statuses", "steps", "reasons", "phase", "dgroups", "tokens", "turns",
                                "bycount", "turn_phase", "col_submit", "col_finals", "ids", "tasks", "span_ids",
                                "lines"};
    PyObject **slots[SLOTS] = {&st.keys, &st.statuses, &st.steps, &st.reasons, &st.phase, &st.dgroups,
                               &st.tokens_by, &st.turns, &st.bycount, &st.turn, &st.col_submit, &st.col_finals,
                               &st.ids, &st.tasks, &st.span_ids, &st.lines};
    for (int i = 0; i < SLOTS; i++)
        if ((*slots[i] = get_attr(st.builder, names[i])) == NULL) goto done;
    for (int i = 0; i < SLOTS; i++)
        if (i < TABLES ? !PyDict_CheckExact(*slots[i]) : i >= 10 && !PyList_CheckExact(*slots[i])) {
            PyErr_SetString(PyExc_TypeError, "FactsBuilder tables must be dicts, its columns lists");
            goto done;
        }
    PyObject *keep = PyObject_GetAttrString(st.builder, "keep_cold");
    int keep_lines = keep ? PyObject_IsTrue(keep) : -1;
    Py_XDECREF(keep);
    if (keep_lines < 0) goto done;
    if (!keep_lines) Py_CLEAR(st.lines);
    Py_ssize_t n = PyList_GET_SIZE(lines);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        int rc = SCAN_OTHER;
        spans.n = 0;
        /* A line as the exporter writes it is read here; any other by orjson (which decides). */
        if (st.counter_names != NULL && PyBytes_CheckExact(line)
            && !(open_phases && memmem(PyBytes_AS_STRING(line), (size_t)PyBytes_GET_SIZE(line), OPEN_MARK,
                                       sizeof(OPEN_MARK) - 1) != NULL)) {
            rc = scan_record(PyBytes_AS_STRING(line), PyBytes_GET_SIZE(line), &rec, &spans, st.counter_names, max_s);
            if (rc == SCAN_OK) rc = add_record(&st, &rec, line, &spans, &seen, &last_sp, &g);
        }
        if (rc == SCAN_OTHER) {
            rec_release(&rec);
            spans.n = 0;
            rc = add_parsed(&st, line, &rec, &spans, open_phases, &ids_ok, &seen, &last_sp, &g);
        }
        rec_release(&rec);
        if (rc == REC_ERROR) goto done;
        if (rc == REC_FALSE) {
            result = Py_False;
            goto done;
        }
    }
    if (flush_rows(&st) < 0) goto done;
    if (seen && PyObject_SetAttr(st.builder, k_seen, Py_True) < 0) goto done;
    result = ids_ok ? Py_True : Py_False;
done:
    rec_release(&rec);
    PyMem_Free(rec.phases);
    PyMem_Free(spans.items);
    Py_XDECREF(last_sp);
    PyMem_Free(st.keys_buf);
    PyMem_Free(st.status_buf);
    PyMem_Free(st.finalized_buf);
    PyMem_Free(st.total_buf);
    PyMem_Free(st.ready_buf);
    for (int i = 0; i < SLOTS; i++) Py_XDECREF(*slots[i]);
    Py_XINCREF(result);
    return result;
}

/* session_facts._components over the (submissions, finalizations) list pairs given: the union
 * of the intervals as disjoint [s0, e0, s1, e1, ...] doubles (bytes, as array("d").tobytes()). */
static PyObject *components(PyObject *self, PyObject *sources) {
    if (!PyList_CheckExact(sources)) {
        PyErr_SetString(PyExc_TypeError, "components() takes a list of (starts, ends) pairs of lists");
        return NULL;
    }
    Pairs pairs = {0};
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sources); i++) {
        PyObject *source = PyList_GET_ITEM(sources, i);
        PyObject *starts, *ends;
        if (!PyArg_ParseTuple(source, "O!O!", &PyList_Type, &starts, &PyList_Type, &ends)) goto done;
        Py_ssize_t n = PyList_GET_SIZE(starts) < PyList_GET_SIZE(ends) ? PyList_GET_SIZE(starts)
                                                                        : PyList_GET_SIZE(ends);
        for (Py_ssize_t j = 0; j < n; j++) {
            double s = PyFloat_AsDouble(PyList_GET_ITEM(starts, j));
            double e = PyFloat_AsDouble(PyList_GET_ITEM(ends, j));
            if (PyErr_Occurred() || pairs_push(&pairs, s, e) < 0) goto done;
        }
    }
    if (pairs.n == 0) {
        out = PyBytes_FromStringAndSize(NULL, 0);
        goto done;
    }
    qsort(pairs.items, (size_t)pairs.n, sizeof(Pair), pair_cmp);
    /* Written over the sorted pairs: component k never lies past pair k. */
    double *flat = (double *)pairs.items;
    Py_ssize_t k = 0;
    double cur_s = pairs.items[0].s, cur_e = pairs.items[0].e;
    for (Py_ssize_t j = 0; j < pairs.n; j++) {
        double s = pairs.items[j].s, e = pairs.items[j].e;
        if (s > cur_e) {
            flat[k++] = cur_s;
            flat[k++] = cur_e;
            cur_s = s;
            cur_e = e;
        } else if (e > cur_e) {
            cur_e = e;
        }
    }
    flat[k++] = cur_s;
    flat[k++] = cur_e;
    out = PyBytes_FromStringAndSize((const char *)flat, (Py_ssize_t)(k * sizeof(double)));
done:
    PyMem_Free(pairs.items);
    return out;
}

/* The float scan_number reads a JSON number as (None for one it leaves to orjson): for tests. */
static PyObject *scan_float(PyObject *self, PyObject *text) {
    if (!PyBytes_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "scan_float() takes bytes");
        return NULL;
    }
    Cursor c = {PyBytes_AS_STRING(text), PyBytes_AS_STRING(text) + PyBytes_GET_SIZE(text)};
    Number num;
    int rc = scan_number(&c, &num);
    if (rc == SCAN_ERROR) return NULL;
    if (rc != SCAN_OK || c.p != c.end) Py_RETURN_NONE;
    return num.is_int ? PyLong_FromLongLong(num.i) : PyFloat_FromDouble(num.d);
}

typedef struct {
    double v;
    Py_ssize_t i;
} Keyed;

static int by_value_desc(const void *a, const void *b) {
    const Keyed *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int by_value_asc(const void *a, const void *b) {
    const Keyed *x = a, *y = b;
    if (x->v < y->v) return -1;
    if (x->v > y->v) return 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The first k of items sorted by cmp, as a list of their indices. */
static PyObject *first_k(Keyed *items, Py_ssize_t n, Py_ssize_t k, int (*cmp)(const void *, const void *)) {
    qsort(items, (size_t)n, sizeof(Keyed), cmp);
    if (k > n) k = n;
    PyObject *out = PyList_New(k);
    for (Py_ssize_t j = 0; out != NULL && j < k; j++) {
        PyObject *i = PyLong_FromSsize_t(items[j].i);
        if (i == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, j, i);
    }
    return out;
}

/* FactsBuilder.result's candidate lists: (top_total, top_done, first_submit), each as
 * sorted(indices, key=..., reverse=...)[:k] gives it (ties in session order), of the sessions
 * past floors (totals above the first two, submissions below the third) when given. */
static PyObject *candidates(PyObject *self, PyObject *args) {
    Py_buffer total, done;
    PyObject *submit, *out = NULL, *a = NULL, *b = NULL, *c = NULL;
    Py_ssize_t k;
    double above_total = -INFINITY, above_done = -INFINITY, below_submit = INFINITY;
    PyObject *floors = Py_None;
    if (!PyArg_ParseTuple(args, "y*y*O!n|O", &total, &done, &PyList_Type, &submit, &k, &floors)) return NULL;
    if (floors != Py_None && !PyArg_ParseTuple(floors, "ddd", &above_total, &above_done, &below_submit)) {
        PyBuffer_Release(&total);
        PyBuffer_Release(&done);
        return NULL;
    }
    Py_ssize_t n = done.len;
    Keyed *items = NULL;
    if (total.len != n * (Py_ssize_t)sizeof(double) || PyList_GET_SIZE(submit) != n) {
        PyErr_SetString(PyExc_ValueError, "candidates(): columns of different lengths");
        goto done;
    }
    items = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Keyed));
    if (items == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const double *t = total.buf;
    const unsigned char *flags = done.buf;
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (t[i] == t[i] && t[i] > above_total) items[m++] = (Keyed){t[i], i};
    if ((a = first_k(items, m, k, by_value_desc)) == NULL) goto done;
    m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (flags[i] && t[i] > above_done) items[m++] = (Keyed){t[i], i};
    if ((b = first_k(items, m, k, by_value_desc)) == NULL) goto done;
    m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (flags[i]) {
            double v = PyFloat_AsDouble(PyList_GET_ITEM(submit, i));
            if (v == -1.0 && PyErr_Occurred()) goto done;
            if (v < below_submit) items[m++] = (Keyed){v, i};
        }
    if ((c = first_k(items, m, k, by_value_asc)) == NULL) goto done;
    out = PyTuple_Pack(3, a, b, c);
done:
    PyMem_Free(items);
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(c);
    PyBuffer_Release(&total);
    PyBuffer_Release(&done);
    return out;
}

/* Sorted runs of doubles (each bytes) merged into one sorted run (bytes): adjacent runs merged
 * pairwise, the earlier run first among equal values, so the order is the one a stable sort of
 * the runs laid end to end gives (list.sort). */
static PyObject *merge_runs(PyObject *self, PyObject *runs) {
    if (!PyList_CheckExact(runs)) {
        PyErr_SetString(PyExc_TypeError, "merge_runs() takes a list of bytes");
        return NULL;
    }
    Py_ssize_t r = PyList_GET_SIZE(runs), n = 0;
    for (Py_ssize_t i = 0; i < r; i++) {
        PyObject *run = PyList_GET_ITEM(runs, i);
        if (!PyBytes_Check(run) || PyBytes_GET_SIZE(run) % sizeof(double)) {
            PyErr_SetString(PyExc_TypeError, "merge_runs() takes runs of doubles as bytes");
            return NULL;
        }
        n += PyBytes_GET_SIZE(run) / (Py_ssize_t)sizeof(double);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    double *tmp = out ? PyMem_Malloc((size_t)(n ? n : 1) * sizeof(double)) : NULL;
    Py_ssize_t *bounds = tmp ? PyMem_Malloc((size_t)(r + 1) * sizeof(Py_ssize_t)) : NULL;
    if (bounds == NULL) {
        PyMem_Free(tmp);
        Py_XDECREF(out);
        return PyErr_NoMemory();
    }
    double *a = (double *)PyBytes_AS_STRING(out), *b = tmp;
    Py_ssize_t at = 0, m = 0;
    for (Py_ssize_t i = 0; i < r; i++) {
        PyObject *run = PyList_GET_ITEM(runs, i);
        Py_ssize_t len = PyBytes_GET_SIZE(run) / (Py_ssize_t)sizeof(double);
        if (len == 0) continue;
        memcpy(a + at, PyBytes_AS_STRING(run), (size_t)len * sizeof(double));
        bounds[m++] = at;
        at += len;
    }
    bounds[m] = n;
    while (m > 1) {
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; i < m; i += 2) {
            Py_ssize_t lo = bounds[i], mid = bounds[i + 1], hi = i + 2 <= m ? bounds[i + 2] : mid;
            Py_ssize_t x = lo, y = mid, z = lo;
            while (x < mid && y < hi) b[z++] = a[y] < a[x] ? a[y++] : a[x++];
            while (x < mid) b[z++] = a[x++];
            while (y < hi) b[z++] = a[y++];
            bounds[k++] = lo;
        }
        bounds[k] = n;
        m = k;
        double *swap = a;
        a = b;
        b = swap;
    }
    if (a != (double *)PyBytes_AS_STRING(out)) memcpy(PyBytes_AS_STRING(out), a, (size_t)n * sizeof(double));
    PyMem_Free(tmp);
    PyMem_Free(bounds);
    return out;
}

/* (min, max) of the items of two lists that are not None, as min() and max() of them laid end
 * to end give them (the first of equal ones); (None, None) when there are none. */
static PyObject *extent(PyObject *self, PyObject *args) {
    PyObject *lists[2], *lo = NULL, *hi = NULL;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &lists[0], &PyList_Type, &lists[1])) return NULL;
    for (int l = 0; l < 2; l++)
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lists[l]); i++) {
            PyObject *v = PyList_GET_ITEM(lists[l], i);
            if (v == Py_None) continue;
            if (lo == NULL) {
                lo = hi = v;
                continue;
            }
            int below, above;
            if (PyFloat_CheckExact(v) && PyFloat_CheckExact(lo) && PyFloat_CheckExact(hi)) {
                below = PyFloat_AS_DOUBLE(v) < PyFloat_AS_DOUBLE(lo);
                above = PyFloat_AS_DOUBLE(v) > PyFloat_AS_DOUBLE(hi);
            } else {
                below = PyObject_RichCompareBool(v, lo, Py_LT);
                above = below < 0 ? -1 : PyObject_RichCompareBool(v, hi, Py_GT);
                if (below < 0 || above < 0) return NULL;
            }
            if (below) lo = v;
            if (above) hi = v;
        }
    if (lo == NULL) return Py_BuildValue("(OO)", Py_None, Py_None);
    return PyTuple_Pack(2, lo, hi);
}

/* Exactly rounded sums (Shewchuk's partials, as math.fsum): the sum of the values added,
 * correctly rounded, whatever their order. finite is cleared by a value or partial that is not. */
typedef struct {
    double *p;
    Py_ssize_t n, cap;
    int finite;
} ExactSum;

static int exact_add(ExactSum *s, double x) {
    if (!isfinite(x)) {
        s->finite = 0;
        return 0;
    }
    Py_ssize_t i = 0;
    for (Py_ssize_t j = 0; j < s->n; j++) {
        double y = s->p[j];
        if (fabs(x) < fabs(y)) {
            double t = x;
            x = y;
            y = t;
        }
        double hi = x + y, lo = y - (hi - x);
        if (lo != 0.0) s->p[i++] = lo;
        x = hi;
    }
    s->n = i;
    if (x != 0.0) {
        if (!isfinite(x)) {
            s->finite = 0;
            return 0;
        }
        if (s->n == s->cap) {
            Py_ssize_t cap = s->cap ? s->cap * 2 : 32;
            double *p = PyMem_Realloc(s->p, (size_t)cap * sizeof(double));
            if (p == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            s->p = p;
            s->cap = cap;
        }
        s->p[s->n++] = x;
    }
    return 0;
}

static double exact_total(ExactSum *s) {
    Py_ssize_t n = s->n;
    double hi = 0.0, lo = 0.0, x, y;
    if (n > 0) {
        hi = s->p[--n];
        while (n > 0) {
            x = hi;
            y = s->p[--n];
            hi = x + y;
            lo = y - (hi - x);
            if (lo != 0.0) break;
        }
        if (n > 0 && ((lo < 0.0 && s->p[n - 1] < 0.0) || (lo > 0.0 && s->p[n - 1] > 0.0))) {
            y = lo * 2.0;
            x = hi + y;
            if (y == x - hi) hi = x;
        }
    }
    return hi;
}

/* longtail._pearson over two lists of floats of the same length (at least 3): the same
 * operations, sums exactly rounded as math.fsum rounds them. None when the Python function
 * answers None, NotImplemented where a value is not finite (the caller then runs it). */
static PyObject *pearson(PyObject *self, PyObject *args) {
    PyObject *xs_obj, *ys_obj, *out = NULL;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &xs_obj, &PyList_Type, &ys_obj)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(xs_obj);
    if (PyList_GET_SIZE(ys_obj) != n || n < 3) Py_RETURN_NOTIMPLEMENTED;
    double *xs = PyMem_Malloc((size_t)n * 2 * sizeof(double)), *ys = xs ? xs + n : NULL;
    ExactSum a = {NULL, 0, 0, 1}, b = {NULL, 0, 0, 1}, c = {NULL, 0, 0, 1};
    if (xs == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(xs_obj, i), *y = PyList_GET_ITEM(ys_obj, i);
        if (!PyFloat_CheckExact(x) || !PyFloat_CheckExact(y)) {
            out = Py_NotImplemented;
            Py_INCREF(out);
            goto done;
        }
        xs[i] = PyFloat_AS_DOUBLE(x);
        ys[i] = PyFloat_AS_DOUBLE(y);
        if (exact_add(&a, xs[i]) < 0 || exact_add(&b, ys[i]) < 0) goto done;
    }
    double mx = exact_total(&a) / (double)n, my = exact_total(&b) / (double)n;
    a.n = b.n = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double dx = xs[i] - mx, dy = ys[i] - my;
        if (exact_add(&a, dx * dx) < 0 || exact_add(&b, dy * dy) < 0 || exact_add(&c, dx * dy) < 0) goto done;
    }
    if (!(a.finite && b.finite && c.finite)) {
        out = Py_NotImplemented;
        Py_INCREF(out);
        goto done;
    }
    double sxx = exact_total(&a), syy = exact_total(&b);
    if (sxx <= 0 || syy <= 0) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    out = PyFloat_FromDouble(exact_total(&c) / sqrt(sxx * syy));
done:
    PyMem_Free(xs);
    PyMem_Free(a.p);
    PyMem_Free(b.p);
    PyMem_Free(c.p);
    return out;
}

/* The most sessions running at once, from their sorted submissions and finalizations (both
 * arrays of doubles; a finalization at the instant of a submission comes first). */
static PyObject *peak_concurrency(PyObject *self, PyObject *args) {
    Py_buffer starts, ends;
    if (!PyArg_ParseTuple(args, "y*y*", &starts, &ends)) return NULL;
    const double *s = starts.buf, *e = ends.buf;
    Py_ssize_t ns = starts.len / (Py_ssize_t)sizeof(double), ne = ends.len / (Py_ssize_t)sizeof(double);
    Py_ssize_t running = 0, peak = 0, j = 0;
    for (Py_ssize_t i = 0; i < ns; i++) {
        while (j < ne && e[j] <= s[i]) {
            running--;
            j++;
        }
        if (++running > peak) peak = running;
    }
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    return PyLong_FromSsize_t(peak);
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *loads, *reason_text, *unattributed, *powers;
    double limit;
    if (!PyArg_ParseTuple(args, "OOdUS", &loads, &reason_text, &limit, &unattributed, &powers)) return NULL;
    if (PyBytes_GET_SIZE(powers) != (POW5_MAX - POW5_MIN + 1) * 16) {
        PyErr_SetString(PyExc_ValueError, "the table of powers of five has the wrong size");
        return NULL;
    }
    static unsigned long long table[(POW5_MAX - POW5_MIN + 1) * 2];
    memcpy(table, PyBytes_AS_STRING(powers), sizeof(table));
    pow5 = table;
    Py_INCREF(loads);
    Py_INCREF(reason_text);
    Py_INCREF(unattributed);
    Py_XSETREF(loads_fn, loads);
    Py_XSETREF(reason_text_fn, reason_text);
    Py_XSETREF(unattributed_name, unattributed);
    max_s = limit;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"add_lines", add_lines, METH_VARARGS,
     "add_lines(builder, lines, careful, tokens_of, open_phases, counter_names=None) -> bool: "
     "FactsBuilder._add_lines in C."},
    {"components", components, METH_O,
     "components([(starts, ends), ...]) -> bytes: session_facts._components, as doubles."},
    {"scan_float", scan_float, METH_O, "scan_float(text: bytes) -> int | float | None: a JSON number as read here."},
    {"candidates", candidates, METH_VARARGS,
     "candidates(total, done, submit, k, floors=None) -> (top_total, top_done, first_submit): "
     "FactsBuilder.result's lists."},
    {"merge_runs", merge_runs, METH_O, "merge_runs(runs: list[bytes]) -> bytes: sorted runs of doubles merged."},
    {"extent", extent, METH_VARARGS, "extent(a, b) -> (min, max) of the items of both lists that are not None."},
    {"pearson", pearson, METH_VARARGS, "pearson(xs, ys) -> float | None | NotImplemented: longtail._pearson."},
    {"peak_concurrency", peak_concurrency, METH_VARARGS,
     "peak_concurrency(starts, ends) -> int: the most sessions running at once (sorted doubles)."},
    {"configure", configure, METH_VARARGS,
     "configure(loads, reason_text, max_s, unattributed, powers_of_five): what add_lines takes from Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_facts_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__facts_native(void) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&k_session_id, "session_id"}, {&k_rank, "rank"}, {&k_role, "role"}, {&k_status, "status"},
        {&k_submit_ts, "submit_ts"}, {&k_finalized_ts, "finalized_ts"}, {&k_total_s, "total_s"},
        {&k_step, "step"}, {&k_phases, "phases"}, {&k_counters, "counters"}, {&k_task_id, "task_id"},
        {&k_span_id, "span_id"}, {&k_trace_id, "trace_id"}, {&k_start_ts, "start_ts"}, {&k_end_ts, "end_ts"},
        {&k_global_step, "global_step"}, {&k_reason, "reason"}, {&k_line, "line"}, {&k_seen, "seen"},
        {&k_add, "add"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    return PyModule_Create(&module);
}
