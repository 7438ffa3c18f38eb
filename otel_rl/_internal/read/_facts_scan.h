/* Reads a session record line as otel_rl's exporter writes it, without building its dicts.
 *
 * Included by _facts_native.c. scan_record() takes a line only when it is the plain case:
 * one JSON object with every field the facts loop reads exactly once, strings of printable
 * ASCII without escapes, times as floats within range, phases as {name: [{start_ts,
 * end_ts}, ...]} and counters as an object. It answers SCAN_OTHER for anything else, and the
 * caller then reads the line with orjson.loads, which decides (so no JSON this file does not
 * fully check is ever taken: a value it skips is checked to the grammar, a string holding
 * anything but printable ASCII sends the line to orjson). What it takes, it takes with the
 * values orjson.loads gives: the same strings and ints, and floats correctly rounded (a
 * decimal of at most 2^53 scaled by an exactly representable power of ten is one IEEE
 * operation; other decimals go through PyOS_string_to_double, as float() does).
 */

enum { SCAN_OK = 0, SCAN_OTHER = 2, SCAN_ERROR = -1 }; /* SCAN_OK and SCAN_ERROR are REC_OK and REC_ERROR */

typedef struct {
    PyObject *name; /* borrowed from the name cache */
    Py_ssize_t first, n;
} PhaseRef;

/* A record's fields as the facts loop reads them; owned marks references to release. */
typedef struct {
    PyObject *sid, *rank, *role, *status, *submit, *finalized, *total, *step, *task_id, *span_id;
    PyObject *global_step; /* NULL: absent */
    PyObject *reason;      /* NULL: absent */
    PyObject *tokens;      /* the response length, NULL when none */
    PhaseRef *phases;
    Py_ssize_t nphases, phase_cap;
    PyObject *owned[64];
    int nowned;
} Rec;

/* The record emptied for the next line: its values released, its fields and phases cleared
 * (the phases' buffer kept). */
static void rec_release(Rec *r) {
    for (int i = 0; i < r->nowned; i++) Py_DECREF(r->owned[i]);
    r->nowned = 0;
    Py_CLEAR(r->tokens);
    memset(r, 0, offsetof(Rec, phases));
    r->nphases = 0;
}

/* obj, kept until the record is released; NULL without an exception when the record holds
 * more values than kept here (the line is then read by orjson). */
static PyObject *rec_own(Rec *r, PyObject *obj) {
    if (obj == NULL) return NULL;
    if (r->nowned == (int)(sizeof(r->owned) / sizeof(r->owned[0]))) {
        Py_DECREF(obj);
        return NULL;
    }
    r->owned[r->nowned++] = obj;
    return obj;
}

static int own_rc(PyObject *obj) { return obj != NULL ? SCAN_OK : PyErr_Occurred() ? SCAN_ERROR : SCAN_OTHER; }

static int rec_phase(Rec *r, PyObject *name, Py_ssize_t first, Py_ssize_t n) {
    if (r->nphases == r->phase_cap) {
        Py_ssize_t cap = r->phase_cap ? r->phase_cap * 2 : 8;
        PhaseRef *phases = PyMem_Realloc(r->phases, (size_t)cap * sizeof(PhaseRef));
        if (phases == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->phases = phases;
        r->phase_cap = cap;
    }
    r->phases[r->nphases].name = name;
    r->phases[r->nphases].first = first;
    r->phases[r->nphases].n = n;
    r->nphases++;
    return 0;
}

typedef struct {
    const char *p, *end;
} Cursor;

static void ws(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int expect(Cursor *c, char ch) {
    ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A string of printable ASCII without escapes: its text (between the quotes). */
static int scan_string(Cursor *c, const char **text, Py_ssize_t *len) {
    ws(c);
    if (c->p >= c->end || *c->p != '"') return SCAN_OTHER;
    const char *s = ++c->p;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            *text = s;
            *len = c->p - s;
            c->p++;
            return SCAN_OK;
        }
        if (ch == '\\' || ch < 0x20 || ch >= 0x7f) return SCAN_OTHER;
        c->p++;
    }
    return SCAN_OTHER;
}

static PyObject *ascii_text(const char *text, Py_ssize_t len) {
    PyObject *s = PyUnicode_New(len, 127);
    if (s != NULL) memcpy(PyUnicode_DATA(s), text, (size_t)len);
    return s;
}

/* The few strings that repeat on every line (roles, statuses, phase names), made once. */
#define NAME_CACHE 64
static struct {
    char *text;
    Py_ssize_t len;
    PyObject *obj;
} names_cache[NAME_CACHE];
static int names_cached = 0;

static PyObject *cached_text(const char *text, Py_ssize_t len) { /* borrowed */
    for (int i = 0; i < names_cached; i++)
        if (names_cache[i].len == len && memcmp(names_cache[i].text, text, (size_t)len) == 0)
            return names_cache[i].obj;
    if (names_cached == NAME_CACHE || len > 64) return NULL; /* the caller makes its own */
    PyObject *obj = ascii_text(text, len);
    char *copy = obj ? PyMem_Malloc((size_t)len + 1) : NULL;
    if (copy == NULL) {
        Py_XDECREF(obj);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    memcpy(copy, text, (size_t)len);
    PyUnicode_InternInPlace(&obj);
    names_cache[names_cached].text = copy;
    names_cache[names_cached].len = len;
    names_cache[names_cached].obj = obj;
    names_cached++;
    return obj;
}

/* A string as a borrowed object: cached when it can be, else owned by the record. */
static PyObject *name_object(Rec *r, const char *text, Py_ssize_t len) {
    PyObject *obj = cached_text(text, len);
    if (obj != NULL || PyErr_Occurred()) return obj;
    return rec_own(r, ascii_text(text, len));
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

typedef struct {
    int is_int;
    long long i;
    double d;
} Number;

/* 5^q for q in [POW5_MIN, POW5_MAX], each as 128 bits (high word, low word): truncated for
 * q >= 0, a reciprocal rounded up for q < 0 (the table of the Eisel-Lemire algorithm, made by
 * session_facts._powers_of_five and handed over by configure()). */
#define POW5_MIN (-342)
#define POW5_MAX 308
static const unsigned long long *pow5 = NULL;

/* w * 10^q as the nearest double (ties to even), by the Eisel-Lemire algorithm: 0 when the
 * answer lies outside the normal doubles (the caller then takes the slow, exact path). */
static int eisel_lemire(unsigned long long w, long q, double *out) {
    if (pow5 == NULL || w == 0 || q < POW5_MIN || q > POW5_MAX) return 0;
    int lz = __builtin_clzll(w);
    w <<= lz;
    const unsigned long long *t = pow5 + 2 * (q - POW5_MIN);
    unsigned __int128 first = (unsigned __int128)w * t[0];
    unsigned long long hi = (unsigned long long)(first >> 64), lo = (unsigned long long)first;
    if ((hi & 0x1FF) == 0x1FF) {
        unsigned __int128 second = (unsigned __int128)w * t[1];
        unsigned long long second_hi = (unsigned long long)(second >> 64);
        lo += second_hi;
        if (second_hi > lo) hi++;
    }
    int upper = (int)(hi >> 63);
    int shift = upper + 64 - 52 - 3;
    unsigned long long mantissa = hi >> shift;
    long power2 = ((((152170 + 65536) * q) >> 16) + 63) + upper - lz + 1023;
    if (power2 <= 0 || power2 >= 0x7FF - 1) return 0; /* subnormal or near infinity: the exact path */
    if (lo <= 1 && q >= -4 && q <= 23 && (mantissa & 3) == 1 && (mantissa << shift) == hi) mantissa &= ~1ULL;
    mantissa += mantissa & 1;
    mantissa >>= 1;
    if (mantissa >= (2ULL << 52)) {
        mantissa = 1ULL << 52;
        power2++;
    }
    mantissa &= ~(1ULL << 52);
    if (power2 >= 0x7FF) return 0;
    unsigned long long bits = mantissa | ((unsigned long long)power2 << 52);
    memcpy(out, &bits, sizeof(bits));
    return 1;
}

/* A JSON number (the grammar checked): an int of at most 18 digits, or a float. */
static int scan_number(Cursor *c, Number *out) {
    ws(c);
    const char *start = c->p;
    int negative = 0;
    if (c->p < c->end && *c->p == '-') {
        negative = 1;
        c->p++;
    }
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return SCAN_OTHER;
    unsigned long long m = 0;
    int digits = 0, frac = 0, is_int = 1;
    long exp10 = 0;
    if (*c->p == '0') {
        c->p++;
    } else {
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (digits < 19) m = m * 10 + (unsigned)(*c->p - '0');
            if (m) digits++;
            c->p++;
        }
    }
    if (c->p < c->end && *c->p == '.') {
        is_int = 0;
        c->p++;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return SCAN_OTHER;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (digits < 19) {
                m = m * 10 + (unsigned)(*c->p - '0');
                frac++;
            }
            if (m) digits++;
            c->p++;
        }
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        is_int = 0;
        c->p++;
        int eneg = 0;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) eneg = *c->p++ == '-';
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return SCAN_OTHER;
        long e = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (e < 100000) e = e * 10 + (*c->p - '0');
            c->p++;
        }
        exp10 = eneg ? -e : e;
    }
    if (digits > 18) return SCAN_OTHER; /* past what these fast paths hold: orjson reads the line */
    out->is_int = is_int;
    if (is_int) {
        out->i = negative ? -(long long)m : (long long)m;
        return SCAN_OK;
    }
    long e10 = exp10 - frac;
    if (m <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        double d = (double)m;
        d = e10 < 0 ? d / POW10[-e10] : d * POW10[e10];
        out->d = negative ? -d : d;
        return SCAN_OK;
    }
    if (eisel_lemire(m, e10, &out->d)) {
        if (negative) out->d = -out->d;
        return SCAN_OK;
    }
    char buf[64];
    Py_ssize_t len = c->p - start;
    if (len >= (Py_ssize_t)sizeof(buf)) return SCAN_OTHER;
    memcpy(buf, start, (size_t)len);
    buf[len] = '\0';
    out->d = PyOS_string_to_double(buf, NULL, NULL);
    if (out->d == -1.0 && PyErr_Occurred()) return SCAN_ERROR;
    /* Past the doubles, or below them: orjson decides what such a number is. */
    if (!isfinite(out->d) || (out->d == 0.0 && m != 0)) return SCAN_OTHER;
    return SCAN_OK;
}

static int scan_literal(Cursor *c, const char *word, Py_ssize_t len) {
    ws(c);
    if (c->end - c->p >= len && memcmp(c->p, word, (size_t)len) == 0) {
        c->p += len;
        return SCAN_OK;
    }
    return SCAN_OTHER;
}

/* Any value, checked to the grammar and passed over. */
static int skip_value(Cursor *c, int depth) {
    ws(c);
    if (c->p >= c->end || depth > 32) return SCAN_OTHER;
    const char *text;
    Py_ssize_t len;
    Number num;
    switch (*c->p) {
    case '"':
        return scan_string(c, &text, &len);
    case 't':
        return scan_literal(c, "true", 4);
    case 'f':
        return scan_literal(c, "false", 5);
    case 'n':
        return scan_literal(c, "null", 4);
    case '[':
        c->p++;
        if (expect(c, ']')) return SCAN_OK;
        do {
            int rc = skip_value(c, depth + 1);
            if (rc != SCAN_OK) return rc;
        } while (expect(c, ','));
        return expect(c, ']') ? SCAN_OK : SCAN_OTHER;
    case '{':
        c->p++;
        if (expect(c, '}')) return SCAN_OK;
        do {
            int rc = scan_string(c, &text, &len);
            if (rc != SCAN_OK) return rc;
            if (!expect(c, ':')) return SCAN_OTHER;
            rc = skip_value(c, depth + 1);
            if (rc != SCAN_OK) return rc;
        } while (expect(c, ','));
        return expect(c, '}') ? SCAN_OK : SCAN_OTHER;
    default:
        return scan_number(c, &num);
    }
}

static int is_null(Cursor *c) {
    ws(c);
    return c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0 && (c->p += 4, 1);
}

/* An id: a string, an int or null (a new reference in *out, owned by the record). */
static int scan_id(Cursor *c, Rec *r, PyObject **out) {
    ws(c);
    if (is_null(c)) {
        *out = Py_None;
        return SCAN_OK;
    }
    if (c->p < c->end && *c->p == '"') {
        const char *text;
        Py_ssize_t len;
        int rc = scan_string(c, &text, &len);
        if (rc != SCAN_OK) return rc;
        return own_rc(*out = rec_own(r, ascii_text(text, len)));
    }
    Number num;
    int rc = scan_number(c, &num);
    if (rc != SCAN_OK) return rc;
    if (!num.is_int) return SCAN_OTHER;
    return own_rc(*out = rec_own(r, PyLong_FromLongLong(num.i)));
}

/* A time: a float within (-max, max), as a new float owned by the record. */
static int scan_time(Cursor *c, Rec *r, double max, PyObject **out) {
    Number num;
    int rc = scan_number(c, &num);
    if (rc != SCAN_OK) return rc;
    if (num.is_int || !(-max < num.d && num.d < max)) return SCAN_OTHER;
    return own_rc(*out = rec_own(r, PyFloat_FromDouble(num.d)));
}

/* {"name": [{"start_ts": s, "end_ts": e}, ...], ...}: names in order, each once; pairs pushed. */
static int scan_phases(Cursor *c, Rec *r, Pairs *spans, double max) {
    if (!expect(c, '{')) return SCAN_OTHER;
    if (expect(c, '}')) return SCAN_OK;
    do {
        const char *text;
        Py_ssize_t len;
        int rc = scan_string(c, &text, &len);
        if (rc != SCAN_OK) return rc;
        PyObject *name = name_object(r, text, len);
        if (name == NULL) return own_rc(NULL);
        for (Py_ssize_t i = 0; i < r->nphases; i++)
            if (PyUnicode_Compare(r->phases[i].name, name) == 0) return SCAN_OTHER; /* a name twice */
        if (!expect(c, ':') || !expect(c, '[')) return SCAN_OTHER;
        Py_ssize_t first = spans->n;
        if (!expect(c, ']')) {
            do {
                if (!expect(c, '{')) return SCAN_OTHER;
                int have = 0;
                double s = 0.0, e = 0.0;
                do {
                    rc = scan_string(c, &text, &len);
                    if (rc != SCAN_OK) return rc;
                    if (!expect(c, ':')) return SCAN_OTHER;
                    int which = len == 8 && memcmp(text, "start_ts", 8) == 0 ? 1
                              : len == 6 && memcmp(text, "end_ts", 6) == 0   ? 2
                                                                              : 0;
                    if (which == 0) {
                        rc = skip_value(c, 1);
                    } else {
                        Number num;
                        rc = scan_number(c, &num);
                        if (rc == SCAN_OK && (num.is_int || (have & which) || !(-max < num.d && num.d < max)))
                            rc = SCAN_OTHER;
                        if (which == 1) s = num.d;
                        else e = num.d;
                        have |= which;
                    }
                    if (rc != SCAN_OK) return rc;
                } while (expect(c, ','));
                if (!expect(c, '}') || have != 3) return SCAN_OTHER;
                if (pairs_push(spans, s, e) < 0) return SCAN_ERROR;
            } while (expect(c, ','));
            if (!expect(c, ']')) return SCAN_OTHER;
        }
        if (rec_phase(r, name, first, spans->n - first) < 0) return SCAN_ERROR;
    } while (expect(c, ','));
    return expect(c, '}') ? SCAN_OK : SCAN_OTHER;
}

/* The response length: the first of names the counters hold as a number (each name at most once). */
static int scan_counters(Cursor *c, Rec *r, PyObject *names) {
    if (!expect(c, '{')) return SCAN_OTHER;
    if (expect(c, '}')) return SCAN_OK;
    Py_ssize_t n = PyTuple_GET_SIZE(names), best = n;
    unsigned long long seen = 0;
    Number value = {0};
    do {
        const char *text;
        Py_ssize_t len;
        int rc = scan_string(c, &text, &len);
        if (rc != SCAN_OK) return rc;
        if (!expect(c, ':')) return SCAN_OTHER;
        Py_ssize_t which = n;
        for (Py_ssize_t i = 0; i < n && i < 64; i++) {
            Py_ssize_t size;
            const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(names, i), &size);
            if (name == NULL) return SCAN_ERROR;
            if (size == len && memcmp(name, text, (size_t)len) == 0) {
                which = i;
                break;
            }
        }
        if (which == n) {
            rc = skip_value(c, 1);
        } else {
            if (seen & (1ULL << which)) return SCAN_OTHER; /* a counter twice: orjson keeps the last */
            seen |= 1ULL << which;
            ws(c);
            if (c->p < c->end && (*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) {
                Number num;
                rc = scan_number(c, &num);
                if (rc == SCAN_OK && which < best) {
                    best = which;
                    value = num;
                }
            } else {
                rc = skip_value(c, 1);
            }
        }
        if (rc != SCAN_OK) return rc;
    } while (expect(c, ','));
    if (!expect(c, '}')) return SCAN_OTHER;
    if (best < n) {
        r->tokens = value.is_int ? PyLong_FromLongLong(value.i) : PyFloat_FromDouble(value.d);
        if (r->tokens == NULL) return SCAN_ERROR;
    }
    return SCAN_OK;
}

enum {
    F_SESSION_ID, F_RANK, F_ROLE, F_STATUS, F_SUBMIT, F_FINALIZED, F_TOTAL, F_STEP, F_PHASES, F_COUNTERS,
    F_TASK_ID, F_SPAN_ID, F_TRACE_ID, F_GLOBAL_STEP, F_REASON, F_COUNT
};
static const char *const FIELD_NAMES[F_COUNT] = {
    "session_id", "rank", "role", "status", "submit_ts", "finalized_ts", "total_s", "step", "phases",
    "counters", "task_id", "span_id", "trace_id", "global_step", "reason"};
#define REQUIRED ((1u << F_GLOBAL_STEP) - 1)

static int field_of(const char *text, Py_ssize_t len) {
    for (int i = 0; i < F_COUNT; i++)
        if ((Py_ssize_t)strlen(FIELD_NAMES[i]) == len && memcmp(FIELD_NAMES[i], text, (size_t)len) == 0) return i;
    return -1;
}

/* One line, the plain case (see the top of this file); *r and spans filled. */
static int scan_record(const char *p, Py_ssize_t size, Rec *r, Pairs *spans, PyObject *counter_names,
                       double max) {
    Cursor c = {p, p + size};
    unsigned seen = 0;
    if (!expect(&c, '{')) return SCAN_OTHER;
    if (expect(&c, '}')) return SCAN_OTHER;
    do {
        const char *text;
        Py_ssize_t len;
        int rc = scan_string(&c, &text, &len);
        if (rc != SCAN_OK) return rc;
        if (!expect(&c, ':')) return SCAN_OTHER;
        int field = field_of(text, len);
        if (field < 0) {
            rc = skip_value(&c, 1);
        } else {
            if (seen & (1u << field)) return SCAN_OTHER; /* a field twice: orjson keeps the last */
            seen |= 1u << field;
            Number num;
            switch (field) {
            case F_SESSION_ID:
                rc = scan_id(&c, r, &r->sid);
                break;
            case F_TASK_ID:
                rc = scan_id(&c, r, &r->task_id);
                break;
            case F_SPAN_ID:
                rc = scan_id(&c, r, &r->span_id);
                break;
            case F_TRACE_ID: {
                PyObject *unused;
                rc = scan_id(&c, r, &unused);
                break;
            }
            case F_RANK:
            case F_STEP:
            case F_GLOBAL_STEP: {
                PyObject **slot = field == F_RANK ? &r->rank : field == F_STEP ? &r->step : &r->global_step;
                if (is_null(&c)) {
                    *slot = Py_None;
                    break;
                }
                rc = scan_number(&c, &num);
                if (rc == SCAN_OK && !num.is_int) rc = SCAN_OTHER;
                if (rc == SCAN_OK) rc = own_rc(*slot = rec_own(r, PyLong_FromLongLong(num.i)));
                break;
            }
            case F_ROLE:
            case F_STATUS:
            case F_REASON: {
                PyObject **slot = field == F_ROLE ? &r->role : field == F_STATUS ? &r->status : &r->reason;
                if (field != F_STATUS && is_null(&c)) {
                    *slot = Py_None;
                    break;
                }
                rc = scan_string(&c, &text, &len);
                if (rc == SCAN_OK && field == F_STATUS && len == 0) rc = SCAN_OTHER;
                if (rc == SCAN_OK) {
                    *slot = field == F_REASON ? rec_own(r, ascii_text(text, len)) : name_object(r, text, len);
                    rc = own_rc(*slot);
                }
                break;
            }
            case F_SUBMIT:
                rc = scan_time(&c, r, max, &r->submit);
                break;
            case F_FINALIZED:
                rc = scan_time(&c, r, max, &r->finalized);
                break;
            case F_TOTAL:
                rc = scan_time(&c, r, max, &r->total);
                break;
            case F_PHASES:
                rc = scan_phases(&c, r, spans, max);
                break;
            case F_COUNTERS:
                rc = is_null(&c) ? SCAN_OK : scan_counters(&c, r, counter_names);
                break;
            }
        }
        if (rc != SCAN_OK) return rc;
    } while (expect(&c, ','));
    if (!expect(&c, '}')) return SCAN_OTHER;
    ws(&c);
    if (c.p != c.end || (seen & REQUIRED) != REQUIRED) return SCAN_OTHER;
    return SCAN_OK;
}
