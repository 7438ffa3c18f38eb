/* JSON values written as orjson writes them, for the compiled twins that write lines
 * themselves (the Chrome trace's events, the session records). Each writer returns 0 when
 * written, -1 on a Python error, SKIP where orjson would write something else or refuse (the
 * caller then has orjson write the value, or the whole line). Include after _cext.h. */
#ifndef OTEL_RL_JSON_H
#define OTEL_RL_JSON_H
#include <math.h>
#include <stdint.h>

/* Results of the writers: 0 written, -1 a Python error, 1 not this file's to write. */
#define SKIP 1

/* Whether none of eight bytes is a control character, a quote or a backslash (the bytes
 * JSON escapes): the classic any-byte-zero and any-byte-below tests, on x and on x with
 * the quote and the backslash xored away. */
static inline int clean8(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = x ^ (ones * '"'), slash = x ^ (ones * '\\');
    uint64_t below = (x - ones * 0x20) & ~x;
    uint64_t q = (quote - ones) & ~quote, s = (slash - ones) & ~slash;
    return ((below | q | s) & highs) == 0;
}

static int put_text(Buf *b, PyObject *s) {
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(s, &len);
    if (!u) { PyErr_Clear(); return SKIP; }  /* a lone surrogate: orjson refuses it */
    if (buf_grow(b, len * 6 + 2) < 0) return -1;
    char *o = b->p + b->n;
    *o++ = '"';
    Py_ssize_t k = 0;
    for (;;) {
        /* eight bytes at a time while none needs escaping (names, ids, most values) */
        while (k + 8 <= len) {
            uint64_t x;
            memcpy(&x, u + k, 8);
            if (!clean8(x)) break;
            memcpy(o, &x, 8);
            o += 8;
            k += 8;
        }
        if (k >= len) break;
        Py_ssize_t stop = k + 8 < len ? k + 8 : len;
        for (; k < stop; k++) {
            unsigned char c = (unsigned char)u[k];
            if (c >= 0x20 && c != '"' && c != '\\') { *o++ = (char)c; continue; }
            *o++ = '\\';
            switch (c) {
                case '"': *o++ = '"'; break;
                case '\\': *o++ = '\\'; break;
                case '\b': *o++ = 'b'; break;
                case '\t': *o++ = 't'; break;
                case '\n': *o++ = 'n'; break;
                case '\f': *o++ = 'f'; break;
                case '\r': *o++ = 'r'; break;
                default:
                    *o++ = 'u'; *o++ = '0'; *o++ = '0';
                    *o++ = hex_digits[c >> 4]; *o++ = hex_digits[c & 15];
            }
        }
    }
    *o++ = '"';
    b->n = o - b->p;
    return 0;
}

/* Decimal digits of v into the end of tmp; returns where they start. */
static char *digits64(char *end, unsigned long long v) {
    static const char pairs[201] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    while (v >= 100) {  /* two digits a division */
        unsigned long long at = (v % 100) * 2;
        v /= 100;
        *--end = pairs[at + 1];
        *--end = pairs[at];
    }
    if (v >= 10) {
        *--end = pairs[v * 2 + 1];
        *--end = pairs[v * 2];
    } else {
        *--end = (char)('0' + (int)v);
    }
    return end;
}

static char *digits(char *end, unsigned __int128 v) {
    const unsigned long long e19 = 10000000000000000000ULL;
    if (v >> 64 == 0) return digits64(end, (unsigned long long)v);
    /* 128-bit division is a library call: split into 19-digit blocks once */
    unsigned long long low = (unsigned long long)(v % e19);
    char *at = digits64(end, low);
    while (at > end - 19) *--at = '0';
    return digits(at, v / e19);
}

/* orjson's text for the decimal n / 10^d (n its shortest digits, no trailing zero unless d
 * is 0), into out: fixed down to 10^-5 ("0.000025"), below that with an exponent ("6.41e-6"),
 * an integer with ".0". Returns the length. */
static Py_ssize_t put_decimal(unsigned __int128 n, int d, char *out) {
    char tmp[48];
    char *end = tmp + sizeof(tmp);
    char *at = digits(end, n);
    Py_ssize_t nd = end - at;
    Py_ssize_t o = 0;
    if (nd - 1 - d < -5) {  /* below 10^-5: "<digit>[.<digits>]e-<exponent>" */
        out[o++] = at[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, at + 1, nd - 1);
            o += nd - 1;
        }
        int exp10 = (int)(d - nd + 1);  /* 6 to 22 */
        out[o++] = 'e';
        out[o++] = '-';
        if (exp10 >= 10) out[o++] = (char)('0' + exp10 / 10);
        out[o++] = (char)('0' + exp10 % 10);
    } else if (d == 0) {
        memcpy(out, at, nd);
        o = nd;
        out[o++] = '.';
        out[o++] = '0';
    } else if (nd > d) {
        memcpy(out, at, nd - d);
        o = nd - d;
        out[o++] = '.';
        memcpy(out + o, at + nd - d, d);
        o += d;
    } else {
        out[o++] = '0';
        out[o++] = '.';
        for (Py_ssize_t z = nd; z < d; z++) out[o++] = '0';
        memcpy(out + o, at, nd);
        o += nd;
    }
    return o;
}

/* The text orjson gives a double in [1e-20, 1e16), found directly: the fewest fraction digits
 * d whose nearest decimal N / 10^d (the even one of two as near) lies strictly within half an
 * ulp of x (x = M * 2^e held exactly in 128-bit integers: M < 2^53 and 10^d <= 10^22 keep
 * M * 10^d below 2^127). Those are repr's shortest digits, written by put_decimal. Where that
 * is not certain (N half an ulp away, a power of two, whose lower neighbour is nearer, more
 * than 22 fraction digits) it returns 0 and the caller asks Python.
 *
 * M * 10^d is kept as q * 2^k + r and carried from one d to the next (times ten: r's overflow
 * goes to q), a multiplication by ten a digit rather than a 128-bit product. */
static int shortest_fixed(double x, char *out, Py_ssize_t *len) {
    if (!(x >= 1e-20 && x < 1e16)) return 0;
    /* x = mant * 2^e read from its bits (a normal double here): frexp and ldexp were library
     * calls on every number written */
    unsigned long long bits;
    memcpy(&bits, &x, sizeof(bits));
    unsigned long long mant = (bits & ((1ULL << 52) - 1)) | (1ULL << 52);
    int e = (int)((bits >> 52) & 0x7ff) - 1075;
    if (e >= 0) {  /* an integer below 1e16: nothing shorter lies within half an ulp */
        *len = put_decimal((unsigned __int128)mant << e, 0, out);
        return 1;
    }
    if (mant == (1ULL << 52)) return 0;
    int k = -e;
    if (k > 120) return 0;
    if (k <= 59) {  /* r below 2^59: the same steps in 64 bits (timestamps, most values above 1) */
        /* 2 * dist < 2^60 < 10^19, so some d <= 19 is taken; q stays below 20 * 2^53 */
        const unsigned long long full = 1ULL << k, mask = full - 1, half = full >> 1;
        unsigned long long q = mant >> k, r = mant & mask, p10 = 1;
        for (int d = 0; d <= 19; d++) {
            if (d) {
                unsigned long long r10 = r * 10;
                q = q * 10 + (r10 >> k);
                r = r10 & mask;
                p10 *= 10;
            }
            int up = r > half || (r == half && (q & 1));
            unsigned long long dist = up ? full - r : r;
            if (2 * dist == p10) return 0;
            if (2 * dist > p10) continue;
            *len = put_decimal(up ? q + 1 : q, d, out);
            return 1;
        }
        return 0;
    }
    const unsigned __int128 full = (unsigned __int128)1 << k, mask = full - 1, half = full >> 1;
    unsigned __int128 q = k >= 64 ? 0 : (unsigned __int128)(mant >> k), r = (unsigned __int128)mant & mask;
    unsigned __int128 p10 = 1;
    for (int d = 0; d <= 22; d++) {
        if (d) {
            unsigned __int128 r10 = r * 10;
            q = q * 10 + (r10 >> k);
            r = r10 & mask;
            p10 *= 10;
        }
        /* two decimals equally near: repr (and orjson) take the even one */
        int up = r > half || (r == half && (q & 1));
        unsigned __int128 dist = up ? full - r : r;
        if (2 * dist == p10) return 0;
        if (2 * dist > p10) continue;
        *len = put_decimal(up ? q + 1 : q, d, out);
        return 1;
    }
    return 0;
}

/* orjson's text for the double (double)v / 10^scale (scale 1 to 9), without searching for
 * its digits where they are known. When |v| < 2^53 and the quotient's ulp is below
 * 10^-scale, the double is v / 10^scale correctly rounded, and that decimal is the one
 * within half an ulp with the fewest digits: a decimal with fewer fraction digits is at least
 * 10^-scale from v / 10^scale, so more than half an ulp from the double; and v / 10^scale is
 * never half-way between two doubles (it would be dyadic, so a double itself). Its digits,
 * trailing zeros dropped, are then repr's. SKIP where that does not hold (the caller writes
 * the double), and for 0. */
static int put_scaled(Buf *b, long long v, int scale) {
    /* the largest binary exponent E with 2^(E - 52) < 10^-scale: a quotient below 2^E + 1
     * has an exponent of at most E, so an ulp below 10^-scale */
    static const int below[10] = {0, 48, 45, 42, 38, 35, 32, 28, 25, 22};
    if (scale < 1 || scale > 9 || v == 0) return SKIP;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    unsigned long long p = 1;
    for (int k = 0; k < scale; k++) p *= 10;
    if (u >= (1ULL << 53) || u / p >= (1ULL << below[scale])) return SKIP;
    int d = scale;
    while (d > 0 && u % 10 == 0) { u /= 10; d--; }
    if (buf_grow(b, 48) < 0) return -1;
    if (v < 0) b->p[b->n++] = '-';
    b->n += put_decimal(u, d, b->p + b->n);
    return 0;
}

/* repr's "<mantissa>e<exponent>" (the same shortest digits) as orjson writes it: the exponent
 * without leading zeros ("9.257e-6", "1e+16"), and at 10^-5 fixed ("0.000015"). */
static int put_exponent(Buf *b, const char *s, const char *e) {
    long exp = strtol(e + 1, NULL, 10);
    if (exp == -5) {
        if (*s == '-' && put(b, s++, 1) < 0) return -1;
        if (PUTS(b, "0.0000") < 0) return -1;
        for (; s < e; s++)
            if (*s != '.' && put(b, s, 1) < 0) return -1;
        return 0;
    }
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "e%c%ld", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    if (put(b, s, e - s) < 0) return -1;
    return put(b, tmp, n);
}

/* An int orjson writes as a number, or SKIP. */
static int put_int(Buf *b, PyObject *v) {
    char tmp[32];
    char *end = tmp + sizeof(tmp), *at;
    unsigned long long m;
    int negative;
    if (small_int(v, &m, &negative)) {
        if (negative && m > (unsigned long long)LLONG_MAX + 1) return SKIP;
        at = digits64(end, m);
        if (negative) *--at = '-';
        return put(b, at, end - at);
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (!overflow) {
        at = digits64(end, x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x);
        if (x < 0) *--at = '-';
        return put(b, at, end - at);
    }
    if (overflow < 0) return SKIP;
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return SKIP; }
    at = digits64(end, u);
    return put(b, at, end - at);
}

/* A finite double as orjson writes it (SKIP for NaN and the infinities, which it writes as null). */
static int put_double(Buf *b, double x) {
    if (!isfinite(x)) return SKIP;
    /* A multiple of 10^-9 (durations: seconds of whole nanoseconds, microseconds to three
     * decimals) has put_scaled's digits; below 4e6, x * 1e9 rounds to that multiple. */
    if (fabs(x) < 4e6) {
        long long n = llround(x * 1e9);
        if ((double)n / 1e9 == x) {
            int r = put_scaled(b, n, 9);
            if (r != SKIP) return r;
        }
    }
    if (buf_grow(b, 48) < 0) return -1;
    Py_ssize_t n;
    if (x == 0.0) {
        if (signbit(x)) return PUTS(b, "-0.0");
        return PUTS(b, "0.0");
    }
    if (x < 0.0) {
        if (shortest_fixed(-x, b->p + b->n + 1, &n)) {
            b->p[b->n] = '-';
            b->n += n + 1;
            return 0;
        }
    } else if (shortest_fixed(x, b->p + b->n, &n)) {
        b->n += n;
        return 0;
    }
    char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s) return -1;
    char *e = strchr(s, 'e');
    int r = e ? put_exponent(b, s, e) : put(b, s, (Py_ssize_t)strlen(s));
    PyMem_Free(s);
    return r;
}

/* str, int, float, bool or None of exactly those types, as orjson writes them; SKIP for
 * anything else (and for what orjson refuses: a lone surrogate, an int past 64 bits). */
static int put_simple(Buf *b, PyObject *v) {
    if (PyUnicode_CheckExact(v)) return put_text(b, v);
    if (v == Py_True) return PUTS(b, "true");
    if (v == Py_False) return PUTS(b, "false");
    if (v == Py_None) return PUTS(b, "null");
    if (PyLong_CheckExact(v)) return put_int(b, v);
    if (PyFloat_CheckExact(v)) {
        double x = PyFloat_AS_DOUBLE(v);
        return isfinite(x) ? put_double(b, x) : PUTS(b, "null");
    }
    return SKIP;
}

#endif
