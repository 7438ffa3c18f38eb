/* Compiled twin of the Perfetto encoder (the Python modules of otel_rl/_internal/encode/perfetto).
 *
 * NativeEncoder reads Chrome trace events as JSON text (a blob of events joined
 * with "," or ",\n", or whole JSONL lines) and writes the same TracePacket bytes
 * as PerfettoEncoder given the same events in the same calls: the same tracks,
 * lane nesting, flow window, interning and packet framing, mirrored function by
 * function (each section names the Python it mirrors). Python's dict semantics
 * are kept where they show in the output: keys compare as Python values do
 * (1 == 1.0 == True), bounded tables are cleared at the same sizes.
 *
 * Anything outside what it mirrors exactly (an integer beyond 64 bits, a list
 * where a name should be, a line the converter's fast path would report) raises
 * Unsupported; its state is then spent, and the converter writes the whole output
 * again with the Python encoder (native.py, PerfettoOutput.restart). Rare values
 * are formatted by Python helpers (_native_helpers.py): str() of a list, a
 * non-hex flow id, a process name's rank.
 *
 * Sections, in order: bytes and maps; JSON; keys and helpers; lanes and tracks;
 * records and the encoder's state; the registry and the packet writer; interning;
 * the slice window; the handlers; writing; the Python type.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

/* ===== growable bytes ======================================================================= */
#if defined(__GNUC__)
#define CTZ64(x) __builtin_ctzll(x)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
static int CTZ64(uint64_t x) { int n = 0; while (!(x & 1)) { x >>= 1; n++; } return n; }
#endif

typedef struct { char *p; Py_ssize_t n, cap; } Buf;

static int buf_grow(Buf *b, Py_ssize_t extra) {
    Py_ssize_t need = b->n + extra;
    if (need <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    b->p = p; b->cap = cap;
    return 0;
}
/* memcpy of a few bytes, in place: most keys copied are tens of bytes, for which a call to memcpy
 * costs more than the copy (the loads all come before the stores). Used on heap text only: on a
 * small array gcc cannot tell the length is within bounds. */
static ALWAYS_INLINE void copy_bytes(char *d, const char *s, size_t n) {
    if (n > 32) { memcpy(d, s, n); return; }
    if (n >= 16) {
        uint64_t a, b, c, x;
        memcpy(&a, s, 8); memcpy(&b, s + 8, 8); memcpy(&c, s + n - 16, 8); memcpy(&x, s + n - 8, 8);
        memcpy(d, &a, 8); memcpy(d + 8, &b, 8); memcpy(d + n - 16, &c, 8); memcpy(d + n - 8, &x, 8);
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, s, 8); memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8); memcpy(d + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4); memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4); memcpy(d + n - 4, &b, 4);
    } else if (n) {
        char a = s[0], b = s[n >> 1], c = s[n - 1];
        d[0] = a; d[n >> 1] = b; d[n - 1] = c;
    }
}
#define BUF_NEED(b, k) do { if ((b)->n + (k) > (b)->cap && buf_grow((b), (k)) < 0) return -1; } while (0)
static ALWAYS_INLINE int buf_put(Buf *b, const void *s, Py_ssize_t n) {
    BUF_NEED(b, n);
    if (n > 0) memcpy(b->p + b->n, s, (size_t)n);  /* > 0: gcc then knows the length is no negative size */
    b->n += n;
    return 0;
}
static int buf_byte(Buf *b, unsigned char c) { BUF_NEED(b, 1); b->p[b->n++] = (char)c; return 0; }
static void buf_free(Buf *b) { PyMem_Free(b->p); b->p = NULL; b->n = b->cap = 0; }
#if defined(__GNUC__)
/* 7 bits a byte: the bytes of v's significant bits, without a loop over them */
static ALWAYS_INLINE int varint_len(uint64_t v) { return v < 0x80 ? 1 : (70 - __builtin_clzll(v)) / 7; }
#else
static int varint_len(uint64_t v) { int n = 1; while (v >= 0x80) { v >>= 7; n++; } return n; }
#endif
static int put_varint_raw(char *p, uint64_t v) {
    int n = 0;
    while (v >= 0x80) { p[n++] = (char)((v & 0x7F) | 0x80); v >>= 7; }
    p[n++] = (char)v;
    return n;
}
static int buf_varint(Buf *b, uint64_t v) { BUF_NEED(b, 10); b->n += put_varint_raw(b->p + b->n, v); return 0; }
static int buf_vfield(Buf *b, int field, uint64_t v) {  /* varint field */
    if (buf_varint(b, (uint64_t)field << 3) < 0) return -1;
    return buf_varint(b, v);
}
static int buf_lfield(Buf *b, int field, const void *s, Py_ssize_t n) {  /* length-delimited field */
    if (buf_varint(b, ((uint64_t)field << 3) | 2) < 0 || buf_varint(b, (uint64_t)n) < 0) return -1;
    return buf_put(b, s, n);
}

/* ===== hashing and key comparison =========================================================== */
static ALWAYS_INLINE uint64_t load64(const char *p) { uint64_t w; memcpy(&w, p, 8); return w; }
static ALWAYS_INLINE uint64_t load32(const char *p) { uint32_t w; memcpy(&w, p, 4); return w; }
/* The 128-bit product of a and b folded to 64 bits: every input bit reaches most output bits. */
static ALWAYS_INLINE uint64_t fold_mul(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
    uint64_t r = a * b;  /* no 128-bit product: a multiply and a shift mix well enough */
    return r ^ (r >> 32) ^ ((a ^ (a >> 29)) * 0xBF58476D1CE4E5B9ULL);
#endif
}
#define HK0 0x9E3779B97F4A7C15ULL
#define HK1 0xBF58476D1CE4E5B9ULL
#define HK2 0x94D049BB133111EBULL
/* Keys are tens of bytes: 16 bytes a step, the last 16 (or fewer) read as overlapping words, so a
 * key of up to 32 bytes costs a few multiplies and no loop over its bytes. Only the maps' layout
 * depends on it (keys are always compared in full). */
static ALWAYS_INLINE uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t seed = HK0 ^ n, a, b;
    if (n > 16) {
        const char *last = p + n - 16;
        while (p < last) { seed = fold_mul(load64(p) ^ HK1, load64(p + 8) ^ seed); p += 16; }
        a = load64(last); b = load64(last + 8);
    } else if (n >= 8) {
        a = load64(p); b = load64(p + n - 8);
    } else if (n >= 4) {
        a = load32(p); b = load32(p + n - 4);
    } else if (n) {
        a = ((uint64_t)(unsigned char)p[0] << 16) | ((uint64_t)(unsigned char)p[n >> 1] << 8) | (unsigned char)p[n - 1];
        b = 0;
    } else {
        a = b = 0;
    }
    return fold_mul(HK2 ^ n, fold_mul(a ^ HK1, b ^ seed));
}
/* Equality of two keys of n bytes: keys are short (tens of bytes), so words compared in place
 * (the last ones overlapping) cost less than a call to memcmp. */
static ALWAYS_INLINE int bytes_eq(const char *a, const char *b, size_t n) {
    if (n > 16) {
        const char *la = a + n - 16, *lb = b + n - 16;
        for (; a < la; a += 16, b += 16)
            if ((load64(a) ^ load64(b)) | (load64(a + 8) ^ load64(b + 8))) return 0;
        return ((load64(la) ^ load64(lb)) | (load64(la + 8) ^ load64(lb + 8))) == 0;
    }
    if (n >= 8) return ((load64(a) ^ load64(b)) | (load64(a + n - 8) ^ load64(b + n - 8))) == 0;
    if (n >= 4) return ((load32(a) ^ load32(b)) | (load32(a + n - 4) ^ load32(b + n - 4))) == 0;
    for (; n; n--) if (*a++ != *b++) return 0;
    return 1;
}

/* ===== refcounted strings (span ids) ======================================================== */
/* A span id carries its own map key (key_val's encoding of the string: 's', the length, the text)
 * and that key's hash, made once: the window and the ancestry look span ids up many times. */
typedef struct { Py_ssize_t rc, n; uint64_t h; size_t kn; int ascii; char *s; char key[]; } Str;
#define STR_KEY_HEAD 5
/* ascii: 1 or 0 when the caller knows whether every byte is ASCII, -1 to find out here */
static Str *str_new_a(const char *s, Py_ssize_t n, int ascii) {
    Str *x = PyMem_Malloc(sizeof(Str) + STR_KEY_HEAD + n + 1);
    if (!x) { PyErr_NoMemory(); return NULL; }
    uint32_t n32 = (uint32_t)n;
    x->rc = 1; x->n = n; x->kn = STR_KEY_HEAD + (size_t)n;
    x->key[0] = 's'; memcpy(x->key + 1, &n32, 4);
    x->s = x->key + STR_KEY_HEAD;
    copy_bytes(x->s, s, (size_t)n); x->s[n] = 0;
    x->h = hash_bytes(x->key, x->kn);
    if (ascii >= 0) { x->ascii = ascii; return x; }
    uint64_t high = 0;  /* whether every byte is ASCII, eight at a time */
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) { uint64_t w; memcpy(&w, s + i, 8); high |= w; }
    for (; i < n; i++) high |= (unsigned char)s[i];
    x->ascii = (high & 0x8080808080808080ULL) == 0;
    return x;
}
static Str *str_new(const char *s, Py_ssize_t n) { return str_new_a(s, n, -1); }
static Str *str_ref(Str *x) { if (x) x->rc++; return x; }
static void str_unref(Str *x) { if (x && --x->rc == 0) PyMem_Free(x); }
static int str_eq(const Str *a, const Str *b) {
    if (a == b) return 1;
    if (!a || !b) return 0;
    return a->h == b->h && a->n == b->n && bytes_eq(a->s, b->s, (size_t)a->n);
}
/* A Str's key as map arguments (key bytes, length, hash). */
#define SKEY(x) (x)->key, (x)->kn, (x)->h

/* ===== hash maps with byte-string keys (Python dicts, cleared as they are) ================== */
typedef void (*FreeFn)(void *);
/* Entries are kept dense, in insertion order, and found through a small index of slots (the
 * entry's number + 1, 0 for an empty slot, and 32 bits of the hash to skip most entries without
 * reading them): growing zeroes and rehashes 8 bytes a slot, not whole entries, and a clear
 * visits only the entries there are. Keys up to INLINE_KEY bytes live in the entry itself (an entry
 * is then 64 bytes; most keys, a member's JSON text among them, fit). */
#define INLINE_KEY 39
typedef struct { uint64_t h; void *v; uint32_t kn; union { char in[INLINE_KEY + 1]; char *out; } k; } Entry;
typedef struct { uint64_t *ix; Entry *en; size_t cap, n, ecap; FreeFn fv; } Map;
#define ENTRY_KEY(en) ((en)->kn <= INLINE_KEY ? (en)->k.in : (en)->k.out)
#define IX_TAG(h) ((h) & 0xFFFFFFFF00000000ULL)

static void map_init(Map *m, FreeFn fv) { m->ix = NULL; m->en = NULL; m->cap = m->n = m->ecap = 0; m->fv = fv; }
static void map_clear(Map *m) {
    if (!m->n) return;
    size_t n = m->n;
    m->n = 0;  /* first: a value freed below may not find itself here */
    for (size_t i = 0; i < n; i++) {
        Entry *en = &m->en[i];
        if (en->kn > INLINE_KEY) PyMem_Free(en->k.out);
        if (m->fv && en->v) m->fv(en->v);
    }
    memset(m->ix, 0, m->cap * sizeof(uint64_t));
}
static void map_free(Map *m) {
    map_clear(m);
    PyMem_Free(m->ix); PyMem_Free(m->en);
    m->ix = NULL; m->en = NULL; m->cap = m->ecap = 0;
}
/* The index slot of key k (hash h), NULL if absent. */
static ALWAYS_INLINE uint64_t *map_slot(const Map *m, const char *k, size_t n, uint64_t h) {
    if (!m->n) return NULL;
    size_t mask = m->cap - 1, i = h & mask;
    uint64_t tag = IX_TAG(h);
    for (;;) {
        uint64_t x = m->ix[i];
        if (!x) return NULL;
        if ((x & 0xFFFFFFFF00000000ULL) == tag) {
            const Entry *en = &m->en[(uint32_t)x - 1];
            if (en->h == h && en->kn == n && bytes_eq(ENTRY_KEY(en), k, n)) return &m->ix[i];
        }
        i = (i + 1) & mask;
    }
}
static ALWAYS_INLINE void *map_get_h(const Map *m, const char *k, size_t n, uint64_t h) {
    uint64_t *s = map_slot(m, k, n, h);
    return s ? m->en[(uint32_t)*s - 1].v : NULL;
}
static ALWAYS_INLINE void *map_get(const Map *m, const Buf *key) {
    if (!m->n) return NULL;
    return map_get_h(m, key->p, (size_t)key->n, hash_bytes(key->p, (size_t)key->n));
}
static int map_has(const Map *m, const Buf *key) {
    if (!m->n) return 0;
    return map_slot(m, key->p, (size_t)key->n, hash_bytes(key->p, (size_t)key->n)) != NULL;
}
static void ix_place(Map *m, uint64_t h, size_t entry) {
    size_t mask = m->cap - 1, i = h & mask;
    while (m->ix[i]) i = (i + 1) & mask;
    m->ix[i] = IX_TAG(h) | (uint64_t)(entry + 1);
}
static int map_resize(Map *m, size_t cap) {
    uint64_t *ix = PyMem_Calloc(cap, sizeof(uint64_t));
    if (!ix) { PyErr_NoMemory(); return -1; }
    PyMem_Free(m->ix);
    m->ix = ix; m->cap = cap;
    for (size_t i = 0; i < m->n; i++) ix_place(m, m->en[i].h, i);
    return 0;
}
/* Room for n entries at once: the window's maps reach thousands of entries within a few thousand
 * events, and each doubling on the way there rehashes the index and copies every entry. */
static int map_reserve(Map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap > m->cap && map_resize(m, cap) < 0) return -1;
    if (n > m->ecap) {
        Entry *en = PyMem_Realloc(m->en, n * sizeof(Entry));
        if (!en) { PyErr_NoMemory(); return -1; }
        m->en = en; m->ecap = n;
    }
    return 0;
}
/* Stores v under key k (hash h; the old value is freed); takes the reference v holds. */
static int map_set_h(Map *m, const char *k, size_t n, uint64_t h, void *v) {
    /* One probe: it finds the key, or stops at the empty slot a new entry then takes (the slot
     * ix_place would find, as nothing moves in between unless the index is resized). */
    uint64_t tag = IX_TAG(h);
    size_t i = 0;
    if (m->cap) {
        size_t mask = m->cap - 1;
        for (i = h & mask;; i = (i + 1) & mask) {
            uint64_t x = m->ix[i];
            if (!x) break;
            if ((x & 0xFFFFFFFF00000000ULL) == tag) {
                Entry *en = &m->en[(uint32_t)x - 1];
                if (en->h == h && en->kn == n && bytes_eq(ENTRY_KEY(en), k, n)) {
                    if (m->fv && en->v && en->v != v) m->fv(en->v);
                    en->v = v;
                    return 0;
                }
            }
        }
    }
    /* at most half full: slots are small, and a miss then probes ~2.5 slots, not ~8.5 */
    int resized = (m->n + 1) * 2 > m->cap;
    if (resized && map_resize(m, m->cap ? m->cap * 2 : 16) < 0) goto fail;
    if (m->n == m->ecap) {
        size_t ecap = m->ecap ? m->ecap * 2 : 8;
        Entry *en = PyMem_Realloc(m->en, ecap * sizeof(Entry));
        if (!en) { PyErr_NoMemory(); goto fail; }
        m->en = en; m->ecap = ecap;
    }
    Entry *en = &m->en[m->n];
    if (n > INLINE_KEY) {
        en->k.out = PyMem_Malloc(n);
        if (!en->k.out) { PyErr_NoMemory(); goto fail; }
        memcpy(en->k.out, k, n);
    } else {
        copy_bytes(en->k.in, k, n);
    }
    en->h = h; en->kn = (uint32_t)n; en->v = v;
    if (resized) ix_place(m, h, m->n);
    else m->ix[i] = tag | (uint64_t)(m->n + 1);
    m->n++;
    return 0;
fail:
    if (m->fv && v) m->fv(v);
    return -1;
}
static int map_set(Map *m, const Buf *key, void *v) {
    return map_set_h(m, key->p, (size_t)key->n, hash_bytes(key->p, (size_t)key->n), v);
}
/* Removes key k; returns its value (the caller's reference now), NULL if absent. */
static void *map_pop_at(Map *m, uint64_t *s) {  /* s: a slot map_slot found */
    size_t gone = (uint32_t)*s - 1, mask = m->cap - 1, i = (size_t)(s - m->ix), j = i;
    Entry *en = &m->en[gone];
    void *v = en->v;
    if (en->kn > INLINE_KEY) PyMem_Free(en->k.out);
    m->ix[i] = 0;
    for (;;) {  /* backward-shift deletion */
        j = (j + 1) & mask;
        uint64_t x = m->ix[j];
        if (!x) break;
        size_t home = m->en[(uint32_t)x - 1].h & mask;
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            m->ix[i] = x; m->ix[j] = 0; i = j;
        }
    }
    size_t last = m->n - 1;
    if (gone != last) {  /* the last entry fills the hole; its slot is renumbered */
        m->en[gone] = m->en[last];
        size_t p = m->en[gone].h & mask;
        while ((uint32_t)m->ix[p] != last + 1) p = (p + 1) & mask;
        m->ix[p] = (m->ix[p] & 0xFFFFFFFF00000000ULL) | (uint64_t)(gone + 1);
    }
    m->n--;
    return v;
}
static void *map_pop_h(Map *m, const char *k, size_t n, uint64_t h) {
    uint64_t *s = map_slot(m, k, n, h);
    return s ? map_pop_at(m, s) : NULL;
}
static void *map_pop(Map *m, const Buf *key) {
    return map_pop_h(m, key->p, (size_t)key->n, hash_bytes(key->p, (size_t)key->n));
}

/* lanes.TwoGenerationMap: when the young generation fills it becomes the old one. */
typedef struct { Map a, b; Map *young, *old; size_t cap; } TwoGen;
static void tg_init(TwoGen *t, size_t cap, FreeFn fv) {
    map_init(&t->a, fv); map_init(&t->b, fv); t->young = &t->a; t->old = &t->b; t->cap = cap ? cap : 1;
}
static void tg_free(TwoGen *t) { map_free(&t->a); map_free(&t->b); }
static void *tg_get_h(TwoGen *t, const char *k, size_t n, uint64_t h) {
    void *v = map_get_h(t->young, k, n, h);
    return v ? v : map_get_h(t->old, k, n, h);
}
static void *tg_get(TwoGen *t, const Buf *k) { return tg_get_h(t, k->p, (size_t)k->n, hash_bytes(k->p, (size_t)k->n)); }
static int tg_set_h(TwoGen *t, const char *k, size_t n, uint64_t h, void *v) {
    if (map_set_h(t->young, k, n, h, v) < 0) return -1;
    if (t->young->n >= t->cap) {
        Map *gone = t->old;
        map_clear(gone);
        t->old = t->young; t->young = gone;
    }
    return 0;
}
static int tg_set(TwoGen *t, const Buf *k, void *v) { return tg_set_h(t, k->p, (size_t)k->n, hash_bytes(k->p, (size_t)k->n), v); }
/* TwoGenerationMap.pop: the young value if any, else the old; both are removed. */
static void *tg_pop_h(TwoGen *t, const char *k, size_t n, uint64_t h) {
    void *y = map_pop_h(t->young, k, n, h), *o = map_pop_h(t->old, k, n, h);
    if (y) { if (o && t->old->fv) t->old->fv(o); return y; }
    return o;
}

/* ===== JSON values ========================================================================== */
enum { V_ABSENT, V_NULL, V_FALSE, V_TRUE, V_INT, V_FLOAT, V_STR, V_ARR, V_OBJ };
/* s/n: a string's UTF-8 text, or the raw JSON text of a list or dict. */
typedef struct { int k; int ascii; int64_t i; double d; const char *s; Py_ssize_t n; } Val;

#define IS_INTLIKE(v) ((v)->k == V_INT || (v)->k == V_TRUE || (v)->k == V_FALSE)
static int is_str(const Val *v, const char *lit) {
    size_t n = strlen(lit);
    return v->k == V_STR && (size_t)v->n == n && memcmp(v->s, lit, n) == 0;
}
static Py_ssize_t utf8_chars(const Val *v) {  /* len() of the Python str */
    if (v->ascii) return v->n;
    Py_ssize_t c = 0;
    for (Py_ssize_t i = 0; i < v->n; i++) c += ((unsigned char)v->s[i] & 0xC0) != 0x80;
    return c;
}

/* Strings decoded from escapes live in arena chunks that never move until the event is done. */
typedef struct Chunk { struct Chunk *next; Py_ssize_t used, cap; char data[1]; } Chunk;
typedef struct { Chunk *head; } Arena;
static char *arena_alloc(Arena *a, Py_ssize_t n) {
    Chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        Py_ssize_t cap = n > 4096 ? n : 4096;
        c = PyMem_Malloc(sizeof(Chunk) + cap);
        if (!c) { PyErr_NoMemory(); return NULL; }
        c->next = a->head; c->used = 0; c->cap = cap; a->head = c;
    }
    char *p = c->data + c->used;
    c->used += n;
    return p;
}
static void arena_reset(Arena *a) {
    Chunk *c = a->head;
    if (!c) return;
    Chunk *rest = c->next;
    c->next = NULL; c->used = 0;
    while (rest) { Chunk *n = rest->next; PyMem_Free(rest); rest = n; }
}
static void arena_free(Arena *a) { arena_reset(a); PyMem_Free(a->head); a->head = NULL; }

/* The keys of an event the encoder reads. */
enum { K_PH, K_NAME, K_CAT, K_TS, K_DUR, K_PID, K_TID, K_ARGS, K_S, K_ID, K_ID2, K_BIND_ID,
       K_START_NS, K_END_NS, K_COUNT };
/* raw: the member's JSON text, from its key's opening quote to the end of its value. slot: a mix
 * of the key's length and last bytes, made as the key is read (encode_args' raw-cache hint slot). */
typedef struct { Val key, val; const char *raw; Py_ssize_t rawn; uint32_t slot; } Member;
typedef struct {
    Val f[K_COUNT];
    Member *args; Py_ssize_t nargs, args_cap;  /* args, when it is a dict */
} Event;

/* Parse outcome: 0 ok, P_ERR not JSON (as orjson says), P_UNSUP valid JSON this parser does not
 * mirror exactly (an integer beyond 64 bits, a repeated key). */
enum { P_OK = 0, P_ERR = 1, P_UNSUP = 2, P_MEM = 3 };
typedef struct { const char *p, *end; Arena *arena; int depth; int nl_ends; } Parser;  /* nl_ends: see ws_slow */

/* The readers below keep their position in a local pointer and return the one after what they
 * read (NULL with *err set on failure), so the hot paths stay in registers; the rare cases
 * (white space, escapes, non-ASCII, exponents, long numbers) live in out-of-line functions. */
#if defined(__GNUC__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#endif
#define IS_DIGIT(c) ((unsigned)((unsigned char)(c) - '0') <= 9u)
#if defined(__GNUC__)
#define COLD __attribute__((noinline, cold))
#else
#define COLD
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The lines read rarely have white space between tokens, so the inline test is one compare (and
 * the loop, out of line, costs the hot paths nothing). */
/* White space. nl_ends: encode_lines parses a line's event up to the end of the block, not to its
 * newline (which is then found where the event ends, not searched for first), so there a newline
 * must end the value as the end of the text would: it is no white space. Every failure at that
 * point is P_ERR either way (a string cannot hold a raw newline, a number or literal stops there),
 * so the outcome is the same as parsing the line alone. */
static COLD const char *ws_slow(const char *p, const char *end, int nl_ends) {
    while (p < end && (*p == ' ' || *p == '\r' || *p == '\t' || (*p == '\n' && !nl_ends))) p++;
    return p;
}
static ALWAYS_INLINE const char *ws(const char *p, const char *end, int nl_ends) {
    return LIKELY(p < end && (unsigned char)*p > ' ') ? p : ws_slow(p, end, nl_ends);
}
static inline void skip_ws(Parser *ps) { ps->p = ws(ps->p, ps->end, ps->nl_ends); }
static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
static int read_u4(const char *p, const char *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) { int h = hexval(p[i]); if (h < 0) return -1; v = v * 16 + h; }
    *out = v;
    return 0;
}
/* Length of the UTF-8 sequence at p (0 when invalid, as Python's decoder judges). */
static int utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (end - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;
        if (c == 0xED && p[1] >= 0xA0) return 0;  /* surrogates */
        return 3;
    }
    if (c < 0xF5) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}
static int put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
/* The bytes of w where a string's scan stops: a quote, a backslash, a control byte (< 0x20) or a
 * non-ASCII one (>= 0x80), flagged by their high bit. Only the lowest flagged byte is exact, and
 * only it is used: a byte's borrow reaches only the bytes above it, and a byte that borrows is
 * flagged itself. For the quote and the backslash a subtraction alone suffices: (x - 1) has its
 * high bit set when x's byte is 0 (a match) or above 0x80, which only a non-ASCII byte of w gives,
 * and those are flagged anyway. */
static ALWAYS_INLINE uint64_t str_stops(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL;
    return (((w ^ 0x2222222222222222ULL) - ones) | ((w ^ 0x5C5C5C5C5C5C5C5CULL) - ones) |
            (w - 0x2020202020202020ULL) | w) & 0x8080808080808080ULL;
}
#if defined(__SSE2__)
/* The same for sixteen bytes at p, a bit per byte, all exact: a signed compare with 0x20 takes
 * the control and the non-ASCII bytes at once. */
static ALWAYS_INLINE unsigned str_stops16(const unsigned char *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"')), slash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, slash), _mm_cmplt_epi8(v, _mm_set1_epi8(0x20))));
}
#endif
/* The rest of a string whose text start..p is plain ASCII so far: escapes, non-ASCII text and the
 * last bytes of the input. out gets its text (in place, or decoded into the arena). */
static const char *string_rest(Arena *arena, const unsigned char *start, const unsigned char *p,
                               const unsigned char *end, Val *out, int *err) {
    int ascii = 1, escaped = 0;
    for (;;) {
        if (end - p >= 8) {  /* eight bytes at a time, jumping to the first that stops the scan */
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t stops = str_stops(w);
            if (!stops) { p += 8; continue; }
            p += CTZ64(stops) >> 3;
        } else if (p >= end) {
            goto bad;
        }
        unsigned c = *p;
        if (c == '"') break;
        if (c < 0x20) goto bad;
        if (c == '\\') {
            escaped = 1;
            if (p + 1 >= end) goto bad;
            p += 2;
            continue;
        }
        if (c >= 0x80) {
            int k = utf8_seq(p, end);
            if (!k) goto bad;
            ascii = 0; p += k;
            continue;
        }
        p++;
    }
    if (out) { out->k = V_STR; out->ascii = ascii; }
    if (!escaped) {
        if (out) { out->s = (const char *)start; out->n = p - start; }
        return (const char *)p + 1;
    }
    char *o = out ? arena_alloc(arena, p - start) : NULL;
    if (out && !o) { *err = P_MEM; return NULL; }
    Py_ssize_t n = 0;
    const unsigned char *q = start;
    while (q < p) {
        if (*q != '\\') { if (o) o[n] = (char)*q; n++; q++; continue; }
        char e = (char)q[1];
        q += 2;
        char simple = 0;
        switch (e) {
        case '"': simple = '"'; break;
        case '\\': simple = '\\'; break;
        case '/': simple = '/'; break;
        case 'b': simple = '\b'; break;
        case 'f': simple = '\f'; break;
        case 'n': simple = '\n'; break;
        case 'r': simple = '\r'; break;
        case 't': simple = '\t'; break;
        case 'u': {
            unsigned cp;
            if (read_u4((const char *)q, (const char *)p, &cp) < 0) goto bad;
            q += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                unsigned lo;
                if (p - q < 6 || q[0] != '\\' || q[1] != 'u' || read_u4((const char *)q + 2, (const char *)p, &lo) < 0
                    || lo < 0xDC00 || lo >= 0xE000) goto bad;
                q += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                goto bad;
            }
            if (cp >= 0x80 && out) out->ascii = 0;
            char tmp[4];
            int k = put_utf8(tmp, cp);
            if (o) memcpy(o + n, tmp, k);
            n += k;
            continue;
        }
        default: goto bad;
        }
        if (o) o[n] = simple;
        n++;
    }
    if (out) { out->s = o; out->n = n; }
    return (const char *)p + 1;
bad:
    *err = P_ERR;
    return NULL;
}
/* A string at q (its opening quote); lo..end is readable (the event's text). Most strings are
 * short plain ASCII: one block scanned. */
static ALWAYS_INLINE const char *string_at(Arena *arena, const char *q, const char *lo, const char *end, Val *out,
                                           int *err) {
    const unsigned char *start = (const unsigned char *)q + 1, *p = start, *e = (const unsigned char *)end;
#if defined(__SSE2__)
    for (;;) {
        unsigned stops;
        if (LIKELY((uintptr_t)p + 16 <= (uintptr_t)e)) {
            stops = str_stops16(p);
            if (!stops) { p += 16; continue; }
        } else if (e - (const unsigned char *)lo >= 16 && p < e) {
            /* the last bytes: read the sixteen that end at end (all the event's), from p on */
            stops = str_stops16(e - 16) >> (16 - (e - p));
            if (!stops) break;
        } else {
            break;
        }
        p += CTZ64(stops);
        if (LIKELY(*p == '"')) {
            if (out) { out->k = V_STR; out->ascii = 1; out->s = (const char *)start; out->n = p - start; }
            return (const char *)p + 1;
        }
        break;
    }
#else
    (void)lo;
    while (LIKELY(e - p >= 8)) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t stops = str_stops(w);
        if (!stops) { p += 8; continue; }
        p += CTZ64(stops) >> 3;
        if (LIKELY(*p == '"')) {
            if (out) { out->k = V_STR; out->ascii = 1; out->s = (const char *)start; out->n = p - start; }
            return (const char *)p + 1;
        }
        break;
    }
#endif
    return string_rest(arena, start, p, e, out, err);
}
/* m * 10**exp10 (m > 0, |exp10| <= 27, m below 10**19), read exactly: m and the power of ten are
 * both exact in x87 extended precision, so one multiplication or division rounds correctly to 64
 * bits; rounding that to a double is exact unless it lands on a double's midpoint, which is left
 * to PyOS_string_to_double (as is everything else). 1: *out set. */
static const long double POW10[] = {1e0L, 1e1L, 1e2L, 1e3L, 1e4L, 1e5L, 1e6L, 1e7L, 1e8L, 1e9L, 1e10L, 1e11L,
    1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
static ALWAYS_INLINE int ld_round(uint64_t m, int exp10, int neg, double *out) {
#if defined(__x86_64__) && defined(__GNUC__)
    volatile long double r = exp10 < 0 ? (long double)m / POW10[-exp10] : (long double)m * POW10[exp10];
    uint64_t mant;
    uint16_t se;
    memcpy(&mant, (const void *)&r, 8);
    memcpy(&se, (const char *)&r + 8, 2);
    int biased = se & 0x7FFF;
    if (biased < 16383 - 1021 || biased > 16383 + 1023) return 0;  /* subnormal or beyond a double */
    if ((mant & 0x7FF) == 0x400) return 0;  /* a double's midpoint: let the exact reader decide */
    double d = (double)r;
    *out = neg ? -d : d;
    return 1;
#else
    (void)m; (void)exp10; (void)neg; (void)out;
    return 0;
#endif
}
/* A decimal of up to 19 significant digits and a small exponent (the text start..end of a valid
 * JSON number), read exactly by ld_round. 1: *out set. */
static int fast_float(const char *p, const char *end, double *out) {
    int neg = 0, digits = 0, exp10 = 0;
    uint64_t m = 0;
    if (*p == '-') { neg = 1; p++; }
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (m || *p != '0') { if (++digits > 19) return 0; m = m * 10 + (uint64_t)(*p - '0'); }
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
            exp10--;
            if (m || *p != '0') { if (++digits > 19) return 0; m = m * 10 + (uint64_t)(*p - '0'); }
        }
    }
    if (p < end) {  /* an exponent */
        int sign = 1, e = 0;
        p++;
        if (*p == '+' || *p == '-') { sign = *p == '-' ? -1 : 1; p++; }
        for (; p < end; p++) { if (e > 10000) return 0; e = e * 10 + (*p - '0'); }
        exp10 += sign * e;
    }
    if (!m) { *out = neg ? -0.0 : 0.0; return 1; }
    if (exp10 < -27 || exp10 > 27) return 0;
    return ld_round(m, exp10, neg, out);
}
/* A float the inline reader does not take (an exponent, many digits): fast_float, else Python's
 * exact reader. */
static int float_slow(const char *start, const char *p, Val *out) {
    double fast;
    if (fast_float(start, p, &fast)) { out->k = V_FLOAT; out->d = fast; return P_OK; }
    char small[64], *text = small;
    Py_ssize_t n = p - start;
    if (n >= (Py_ssize_t)sizeof small) {
        text = PyMem_Malloc(n + 1);
        if (!text) return P_MEM;
    }
    memcpy(text, start, n);
    text[n] = 0;
    double d = PyOS_string_to_double(text, NULL, NULL);
    if (text != small) PyMem_Free(text);
    if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return P_ERR; }
    if (isinf(d)) return P_ERR;  /* orjson: "number is infinity when parsed as double" */
    out->k = V_FLOAT;
    out->d = d;
    return P_OK;
}
/* The digits that begin the eight bytes w (the first in the lowest byte, a digit): how many (1 to
 * 8), and their value in *val. A byte below '0' sets its high bit in w - 0x30.., one above '9' in
 * w + 0x46.. (or in both); only the lowest flag is exact, as in str_stops, and only it is used. */
static const uint64_t POW10U[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
static ALWAYS_INLINE int digits8(uint64_t w, uint64_t *val) {
    uint64_t v = w - 0x3030303030303030ULL;
    uint64_t nd = (v | (w + 0x4646464646464646ULL)) & 0x8080808080808080ULL;
    int n = nd ? CTZ64(nd) >> 3 : 8;
    v <<= 64 - 8 * n;  /* the digits to the top bytes, the zeros below them leading zeros */
    v = (v * 10 + (v >> 8)) & 0x00FF00FF00FF00FFULL;    /* pairs of digits, in 16-bit lanes */
    v = (v * 100 + (v >> 16)) & 0x0000FFFF0000FFFFULL;  /* fours, in 32-bit lanes */
    *val = (v * 10000 + (v >> 32)) & 0xFFFFFFFFULL;
    return n;
}
/* The digits at p, accumulated into *acc (which wraps beyond 19 digits); returns the byte after.
 * Eight at a time, but a lone digit (a small integer, common) is taken by itself, and a word is
 * only read when a digit begins it. */
static ALWAYS_INLINE const char *digits_at(const char *p, const char *end, uint64_t *acc) {
    uint64_t m = *acc, v;
    while (p < end && IS_DIGIT(*p)) {
        if (p + 1 >= end || !IS_DIGIT(p[1])) { m = m * 10 + ((unsigned char)*p - '0'); p++; break; }
        if (end - p < 8) {
            while (p < end && IS_DIGIT(*p)) { m = m * 10 + ((unsigned char)*p - '0'); p++; }
            break;
        }
        uint64_t w;
        memcpy(&w, p, 8);
        int n = digits8(w, &v);
        m = m * POW10U[n] + v;
        p += n;
        if (n < 8) break;
    }
    *acc = m;
    return p;
}
/* A number at p (p < end), checked and read in one pass: the digits are accumulated as they are
 * scanned, and a float without exponent of up to 19 significant digits is made from them
 * (the same m and power of ten fast_float would find). Values are only made when out is given:
 * a skipped integer beyond 64 bits is no failure. */
static ALWAYS_INLINE const char *number_at(const char *p, const char *end, int neg, Val *out, int *err) {
    const char *start = p;
    p += neg;
    if (neg && (p >= end || !IS_DIGIT(*p))) goto bad;  /* (without the sign the caller saw a digit) */
    uint64_t m = 0;
    const char *digits = p;
    if (*p == '0') {
        p++;
        if (p < end && IS_DIGIT(*p)) goto bad;  /* a leading zero */
    } else {
        p = digits_at(p, end, &m);
    }
    Py_ssize_t sig = p - digits;  /* significant digits so far (m wraps beyond 19) */
    if (LIKELY(p >= end || (*p != '.' && (*p | 0x20) != 'e'))) {
        if (out) {
            /* 19 digits always fit in 64 bits, and more never fit in an int64 */
            if (UNLIKELY(sig > 19) || (neg ? m > (uint64_t)INT64_MAX + 1 : m > (uint64_t)INT64_MAX)) {
                *err = P_UNSUP;
                return NULL;
            }
            out->k = V_INT;
            out->i = neg ? (int64_t)(0 - m) : (int64_t)m;
        }
        return p;
    }
    if (*digits == '0') sig = 0;  /* "0": a leading zero, not significant */
    Py_ssize_t frac = 0;
    int simple = 1;
    if (*p == '.') {
        p++;
        if (p >= end || !IS_DIGIT(*p)) goto bad;
        const char *fs = p;
        if (!sig) while (p < end && *p == '0') p++;  /* leading zeros: not significant either */
        const char *sd = p;
        p = digits_at(p, end, &m);
        frac = p - fs;
        sig += p - sd;
    }
    if (p < end && (*p | 0x20) == 'e') {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !IS_DIGIT(*p)) goto bad;
        while (p < end && IS_DIGIT(*p)) p++;
        simple = 0;
    }
    if (!out) return p;
    if (LIKELY(simple && sig <= 19)) {
        if (!m) { out->k = V_FLOAT; out->d = neg ? -0.0 : 0.0; return p; }
        if (frac <= 27 && ld_round(m, -(int)frac, neg, &out->d)) { out->k = V_FLOAT; return p; }
    }
    int r = float_slow(start, p, out);
    if (r) { *err = r; return NULL; }
    return p;
bad:
    *err = P_ERR;
    return NULL;
}
/* A negative number: rarer, and out of line. */
static const char *negative_at(const char *p, const char *end, Val *out, int *err) {
    return number_at(p, end, 1, out, err);
}
/* true, false or null at p: n bytes of lit. */
static ALWAYS_INLINE const char *literal_at(const char *p, const char *end, const char *lit, int n, int kind,
                                            Val *out, int *err) {
    if (UNLIKELY(end - p < n || memcmp(p, lit, n) != 0)) { *err = P_ERR; return NULL; }
    if (out) out->k = kind;
    return p + n;
}
static const char *container_at(Parser *ps, const char *p, const char *lo, const char *end, Val *out, int *err);
/* Any value at p (or after white space at p); out (if given) gets it. */
static ALWAYS_INLINE const char *value_at(Parser *ps, const char *p, const char *lo, const char *end, Val *out,
                                          int *err) {
    for (;;) {
        if (UNLIKELY(p >= end)) { *err = P_ERR; return NULL; }
        unsigned char c = (unsigned char)*p;
        if (c == '"') return string_at(ps->arena, p, lo, end, out, err);
        if (IS_DIGIT(c)) return number_at(p, end, 0, out, err);
        if (c == '-') return negative_at(p, end, out, err);
        switch (c) {
        case '{': case '[': return container_at(ps, p, lo, end, out, err);
        case 't': return literal_at(p, end, "true", 4, V_TRUE, out, err);
        case 'f': return literal_at(p, end, "false", 5, V_FALSE, out, err);
        case 'n': return literal_at(p, end, "null", 4, V_NULL, out, err);
        case ' ': case '\t': case '\n': case '\r': {  /* rare */
            const char *q = ws_slow(p, end, ps->nl_ends);
            if (q == p) { *err = P_ERR; return NULL; }  /* a newline that ends the line (see ws_slow) */
            p = q;
            continue;
        }
        default: *err = P_ERR; return NULL;
        }
    }
}
/* A list or dict whose members are not kept: checked, and its raw text noted. */
static const char *container_at(Parser *ps, const char *p, const char *lo, const char *end, Val *out, int *err) {
    const char *start = p;
    char open = *p, close = open == '[' ? ']' : '}';
    if (++ps->depth > 1000) { *err = P_UNSUP; return NULL; }
    p = ws(p + 1, end, ps->nl_ends);
    if (p < end && *p == close) {
        p++;
    } else {
        for (;;) {
            if (open == '{') {
                p = ws(p, end, ps->nl_ends);
                if (p >= end || *p != '"') goto bad;
                if (!(p = string_at(ps->arena, p, lo, end, NULL, err))) return NULL;
                p = ws(p, end, ps->nl_ends);
                if (p >= end || *p != ':') goto bad;
                p++;
            }
            p = ws(p, end, ps->nl_ends);
            if (!(p = value_at(ps, p, lo, end, NULL, err))) return NULL;
            p = ws(p, end, ps->nl_ends);
            if (p >= end) goto bad;
            if (*p == ',') { p++; continue; }
            if (*p == close) { p++; break; }
            goto bad;
        }
    }
    ps->depth--;
    if (out) { out->k = open == '[' ? V_ARR : V_OBJ; out->s = start; out->n = p - start; out->ascii = 0; }
    return p;
bad:
    *err = P_ERR;
    return NULL;
}
/* The event keys the encoder reads, by length, then by their bytes read as one integer. */
static ALWAYS_INLINE int top_key(const char *s, Py_ssize_t n) {
    uint16_t w2; uint32_t w4;
    switch (n) {
    case 1: return s[0] == 's' ? K_S : -1;
    case 2:
        memcpy(&w2, s, 2);
        if (w2 == ('p' | 'h' << 8)) return K_PH;
        if (w2 == ('t' | 's' << 8)) return K_TS;
        if (w2 == ('i' | 'd' << 8)) return K_ID;
        return -1;
    case 3:
        memcpy(&w2, s + 1, 2);
        if (w2 == ('i' | 'd' << 8)) return s[0] == 'p' ? K_PID : s[0] == 't' ? K_TID : -1;
        if (w2 == ('a' | 't' << 8)) return s[0] == 'c' ? K_CAT : -1;
        if (w2 == ('u' | 'r' << 8)) return s[0] == 'd' ? K_DUR : -1;
        if (w2 == ('d' | '2' << 8)) return s[0] == 'i' ? K_ID2 : -1;
        return -1;
    case 4:
        memcpy(&w4, s, 4);
        if (w4 == ('n' | 'a' << 8 | 'm' << 16 | (uint32_t)'e' << 24)) return K_NAME;
        if (w4 == ('a' | 'r' << 8 | 'g' << 16 | (uint32_t)'s' << 24)) return K_ARGS;
        return -1;
    case 7: return memcmp(s, "bind_id", 7) == 0 ? K_BIND_ID : -1;
    case 14: return memcmp(s, "otel_rl.end_ns", 14) == 0 ? K_END_NS : -1;
    case 16: return memcmp(s, "otel_rl.start_ns", 16) == 0 ? K_START_NS : -1;
    default: return -1;
    }
}
static int val_bytes_eq(const Val *a, const Val *b) { return a->n == b->n && memcmp(a->s, b->s, a->n) == 0; }
static int args_grow(Event *ev) {
    Py_ssize_t cap = ev->args_cap ? ev->args_cap * 2 : 32;
    Member *m = PyMem_Realloc(ev->args, cap * sizeof(Member));
    if (!m) return -1;
    ev->args = m; ev->args_cap = cap;
    return 0;
}
/* p at the byte c, or at white space before it: p after c (NULL if neither). The white space
 * test is left to the slow branch, which the compact lines read never take. */
static ALWAYS_INLINE const char *expect(const char *p, const char *end, char c, int nl_ends) {
    if (LIKELY(p < end && *p == c)) return p + 1;
    p = ws_slow(p, end, nl_ends);
    return p < end && *p == c ? p + 1 : NULL;
}
/* The first n bytes of lit as a little-endian integer (a constant once inlined). */
static ALWAYS_INLINE uint64_t lit_word(const char *lit, int n) {
    uint64_t w = 0;
    for (int i = 0; i < n; i++) w |= (uint64_t)(unsigned char)lit[i] << (8 * i);
    return w;
}
#define LIT_IS(w, lit) (((w) & ((~0ULL) >> (64 - 8 * (sizeof(lit) - 1)))) == lit_word(lit, sizeof(lit) - 1))
/* The usual event keys, seen with their closing quote and colon in the eight bytes w after the
 * opening quote: the key's index, *len the bytes they take; -1 for any other text (a key spelled
 * with escapes or followed by white space is read the long way, with the same outcome). */
static ALWAYS_INLINE int key_peek(uint64_t w, int *len) {
    switch ((unsigned char)w) {
    case 'p':
        if (LIT_IS(w, "pid\":")) { *len = 5; return K_PID; }
        if (LIT_IS(w, "ph\":")) { *len = 4; return K_PH; }
        return -1;
    case 't':
        if (LIT_IS(w, "tid\":")) { *len = 5; return K_TID; }
        if (LIT_IS(w, "ts\":")) { *len = 4; return K_TS; }
        return -1;
    case 'n': if (LIT_IS(w, "name\":")) { *len = 6; return K_NAME; } return -1;
    case 'c': if (LIT_IS(w, "cat\":")) { *len = 5; return K_CAT; } return -1;
    case 'd': if (LIT_IS(w, "dur\":")) { *len = 5; return K_DUR; } return -1;
    case 'a': if (LIT_IS(w, "args\":")) { *len = 6; return K_ARGS; } return -1;
    case 'i':
        if (LIT_IS(w, "id\":")) { *len = 4; return K_ID; }
        if (LIT_IS(w, "id2\":")) { *len = 5; return K_ID2; }
        return -1;
    case 's': if (LIT_IS(w, "s\":")) { *len = 3; return K_S; } return -1;
    default: return -1;
    }
}
/* The members of the args dict at p, in order (a repeated key is not mirrored: Unsupported). */
static ALWAYS_INLINE const char *args_at(Parser *ps, const char *p, const char *lo, const char *end, Event *ev,
                                         int *err) {
    p = ws(p + 1, end, ps->nl_ends);
    if (p < end && *p == '}') return p + 1;
    uint64_t seen = 0;  /* a bit per (length, last four bytes) of the keys so far */
    Py_ssize_t nargs = ev->nargs;
    if (!(p = expect(p, end, '"', ps->nl_ends))) goto bad;
    for (;;) {  /* p after a key's opening quote */
        if (UNLIKELY(nargs == ev->args_cap) && args_grow(ev) < 0) { *err = P_MEM; return NULL; }
        Member *m = &ev->args[nargs];
        m->raw = p - 1;
        if (!(p = string_at(ps->arena, p - 1, lo, end, &m->key, err))) return NULL;
        if (!(p = expect(p, end, ':', ps->nl_ends))) goto bad;
        if (!(p = value_at(ps, p, lo, end, &m->val, err))) return NULL;
        m->rawn = p - m->raw;
        const unsigned char *ks = (const unsigned char *)m->key.s;
        Py_ssize_t kn = m->key.n;
        uint32_t t;  /* the key's last four bytes and its length, mixed by a multiplication */
        if (LIKELY(kn >= 4)) memcpy(&t, ks + kn - 4, 4);
        else t = ks[0] | (uint32_t)ks[kn >> 1] << 8 | (uint32_t)ks[kn - 1] << 16;  /* (an empty key: its quotes, as it
                                                                                 * is never one decoded from escapes) */
        uint64_t mix = (t ^ (uint64_t)kn << 32) * 0x9E3779B97F4A7C15ULL;
        uint64_t bit = 1ULL << (mix >> 58);
        m->slot = (uint32_t)(mix >> 48);
        if (UNLIKELY(seen & bit)) {  /* perhaps a repeated key: only then are the keys compared */
            for (Py_ssize_t j = 0; j < nargs; j++)
                if (val_bytes_eq(&ev->args[j].key, &m->key)) { *err = P_UNSUP; return NULL; }
        }
        seen |= bit;
        ev->nargs = ++nargs;
        if (LIKELY((uintptr_t)p + 2 <= (uintptr_t)end)) {  /* the next key's quote, most often */
            uint16_t t;
            memcpy(&t, p, 2);
            if (t == (',' | '"' << 8)) { p += 2; continue; }
        }
        if (p < end && *p == '}') return p + 1;
        p = ws_slow(p, end, ps->nl_ends);
        if (p >= end) goto bad;
        if (*p == ',') { if (!(p = expect(p + 1, end, '"', ps->nl_ends))) goto bad; continue; }
        if (*p == '}') return p + 1;
        goto bad;
    }
bad:
    *err = P_ERR;
    return NULL;
}
/* One event (any JSON value) at ps->p; *is_object says whether it is a dict. */
static int parse_event(Parser *ps, Event *ev, int *is_object) {
    const char *end = ps->end, *lo = ps->p, *p;
    int err = P_ERR;
    for (int i = 0; i < K_COUNT; i++) ev->f[i].k = V_ABSENT;
    ev->nargs = 0;
    ps->depth = 0;
    p = ws(ps->p, end, ps->nl_ends);
    if (p >= end) return P_ERR;
    if (*p != '{') {
        *is_object = 0;
        if (!(p = value_at(ps, p, lo, end, NULL, &err))) return err;
        ps->p = p;
        return P_OK;
    }
    *is_object = 1;
    p = ws(p + 1, end, ps->nl_ends);
    if (p < end && *p == '}') { ps->p = p + 1; return P_OK; }
    ps->depth = 1;
    if (!(p = expect(p, end, '"', ps->nl_ends))) return P_ERR;
    for (;;) {  /* p after a key's opening quote */
        int which = -1, len;
        if (LIKELY(end - p >= 8)) {
            uint64_t w;
            memcpy(&w, p, 8);
            which = key_peek(w, &len);
        }
        if (which >= 0) {
            p += len;
        } else {
            Val key;
            if (!(p = string_at(ps->arena, p - 1, lo, end, &key, &err))) return err;
            if (!(p = expect(p, end, ':', ps->nl_ends))) return P_ERR;
            which = top_key(key.s, key.n);
        }
        if (which >= 0 && ev->f[which].k != V_ABSENT) return P_UNSUP;
        if (which == K_ARGS && (p = ws(p, end, ps->nl_ends)) < end && *p == '{') {
            const char *start = p;
            if (!(p = args_at(ps, p, lo, end, ev, &err))) return err;
            ev->f[K_ARGS].k = V_OBJ; ev->f[K_ARGS].s = start; ev->f[K_ARGS].n = p - start;
        } else if (!(p = value_at(ps, p, lo, end, which >= 0 ? &ev->f[which] : NULL, &err))) {
            return err;
        }
        if (LIKELY((uintptr_t)p + 2 <= (uintptr_t)end)) {  /* the next key's quote, most often */
            uint16_t t;
            memcpy(&t, p, 2);
            if (t == (',' | '"' << 8)) { p += 2; continue; }
        }
        if (p < end && *p == '}') { ps->p = p + 1; return P_OK; }
        p = ws_slow(p, end, ps->nl_ends);
        if (p >= end) return P_ERR;
        if (*p == ',') { if (!(p = expect(p + 1, end, '"', ps->nl_ends))) return P_ERR; continue; }
        if (*p == '}') { ps->p = p + 1; return P_OK; }
        return P_ERR;
    }
}

/* ===== keys that compare as Python values do ================================================ */
/* A value's part of a dict key: 1, 1.0 and True are one key, as in Python; lists and dicts are
 * unhashable (the callers never get here with one). */
static ALWAYS_INLINE int key_val(Buf *k, const Val *v) {
    int64_t i;
    if (v->k == V_STR) {  /* the common part, first: its room and its bytes in one step */
        uint32_t n = (uint32_t)v->n;
        BUF_NEED(k, 5 + v->n);
        char *p = k->p + k->n;
        p[0] = 's'; memcpy(p + 1, &n, 4);
        copy_bytes(p + 5, v->s, (size_t)v->n);
        k->n += 5 + v->n;
        return 0;
    }
    BUF_NEED(k, 16);
    switch (v->k) {
    case V_ABSENT: case V_NULL: k->p[k->n++] = 'N'; return 0;
    case V_FALSE: i = 0; break;
    case V_TRUE: i = 1; break;
    case V_INT: i = v->i; break;
    case V_FLOAT:
        /* integral and within int64: the int's key (the range test first makes the cast exact) */
        if (v->d >= -9223372036854775808.0 && v->d < 9223372036854775808.0 && (double)(int64_t)v->d == v->d) {
            i = (int64_t)v->d;
            break;
        }
        k->p[k->n++] = 'f';
        memcpy(k->p + k->n, &v->d, 8); k->n += 8;
        return 0;
    default: k->p[k->n++] = '?'; return buf_put(k, v->s, v->n);
    }
    k->p[k->n++] = 'i';
    memcpy(k->p + k->n, &i, 8); k->n += 8;
    return 0;
}
static int key_int(Buf *k, int64_t i) { Val v = {V_INT}; v.i = i; return key_val(k, &v); }
static ALWAYS_INLINE int key_text(Buf *k, const char *s, Py_ssize_t n) {
    Val v = {V_STR}; v.s = s; v.n = n; return key_val(k, &v);
}

/* ===== Python helpers for rare values ======================================================= */
static PyObject *Unsupported;  /* the exception */
static PyObject *helpers;      /* otel_rl._internal.encode.perfetto._native_helpers */

static PyObject *helper(const char *name) {
    if (!helpers) {
        helpers = PyImport_ImportModule("otel_rl._internal.encode.perfetto._native_helpers");
        if (!helpers) return NULL;
    }
    return PyObject_GetAttrString(helpers, name);
}
/* Appends the bytes the Python helper `name` returns for a list or dict given as its JSON text. */
static int put_helper(Buf *out, const char *name, const Val *v) {
    PyObject *f = helper(name);
    if (!f) return -1;
    PyObject *res = PyObject_CallFunction(f, "y#", v->s, v->n);
    Py_DECREF(f);
    if (!res) return -1;
    int rc = buf_put(out, PyBytes_AS_STRING(res), PyBytes_GET_SIZE(res));
    Py_DECREF(res);
    return rc;
}
/* str(value) of the Python value, as UTF-8 (with errors="replace", as the encoder writes it). */
static int pystr(Buf *out, const Val *v) {
    char tmp[32];
    switch (v->k) {
    case V_ABSENT: case V_NULL: return buf_put(out, "None", 4);
    case V_TRUE: return buf_put(out, "True", 4);
    case V_FALSE: return buf_put(out, "False", 5);
    case V_INT: {  /* decimal digits written here: snprintf costs ten times as much */
        uint64_t u = v->i < 0 ? 0 - (uint64_t)v->i : (uint64_t)v->i;
        char *p = tmp + sizeof tmp;
        do { *--p = (char)('0' + u % 10); u /= 10; } while (u);
        if (v->i < 0) *--p = '-';
        return buf_put(out, p, tmp + sizeof tmp - p);
    }
    case V_FLOAT: {
        char *r = PyOS_double_to_string(v->d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (!r) return -1;
        int rc = buf_put(out, r, strlen(r));
        PyMem_Free(r);
        return rc;
    }
    case V_STR: return buf_put(out, v->s, v->n);
    default: return put_helper(out, "text_of", v);
    }
}

/* packets.flow_id: a span id (hex text) mixed into a flow id; other text via Python. */
#define FLOW_MIX 0x5D1C7A3E94B20F61ULL
static int flow_id_text(const char *s, Py_ssize_t n, uint64_t *out) {
    int hex = n > 0;
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n && hex; i++) {
        int h = hexval(s[i]);
        if (h < 0) hex = 0; else v = (v << 4) | (uint64_t)h;
    }
    if (hex) {
        v ^= FLOW_MIX;
        *out = v ? v : 1;
        return 0;
    }
    PyObject *f = helper("flow_id");
    if (!f) return -1;
    PyObject *res = PyObject_CallFunction(f, "y#", s, n);
    Py_DECREF(f);
    if (!res) return -1;
    *out = PyLong_AsUnsignedLongLongMask(res);
    Py_DECREF(res);
    return PyErr_Occurred() ? -1 : 0;
}

/* ===== wire constants (fields.py) =========================================================== */
#define F_PACKET_KEY 0x0A
#define F_TIMESTAMP_KEY 0x40
#define F_TRACK_EVENT_KEY 0x5A
#define F_TRACK_UUID_KEY 0x58
#define F_NAME_IID_KEY 0x50
#define F_CATEGORY_IID_KEY 0x18
#define F_ANNOTATION_KEY 0x22
#define F_COUNTER_VALUE_KEY 0xF0, 0x01
#define F_DOUBLE_COUNTER_VALUE_KEY 0xE1, 0x02
enum { TYPE_SLICE_BEGIN = 1, TYPE_SLICE_END = 2, TYPE_INSTANT = 3, TYPE_COUNTER = 4 };
enum { A_NAME_IID = 1, A_BOOL = 2, A_INT = 4, A_DOUBLE = 5, A_STRING = 6, A_STRING_IID = 17 };
enum { T_UUID = 1, T_NAME = 2, T_PROCESS = 3, T_THREAD = 4, T_PARENT = 5, T_COUNTER = 8, T_ORDER = 11,
       T_RANK = 12, CHILD_EXPLICIT = 3 };
#define INT32_MAXV 2147483647LL

/* ===== lanes.Lane: a forest of properly nested intervals ==================================== */
typedef struct Level {
    int64_t *starts, *ends; Str **ids; struct Level **kids;
    Py_ssize_t n, cap;
} Level;
typedef struct { Level root; Py_ssize_t count; int64_t max_end, pruned_before; Py_ssize_t next_prune; } Lane;

static void level_free(Level *l);
static void level_release(Level *l) { if (l) { level_free(l); PyMem_Free(l); } }
static void level_free(Level *l) {
    for (Py_ssize_t i = 0; i < l->n; i++) { str_unref(l->ids[i]); level_release(l->kids[i]); }
    PyMem_Free(l->starts);  /* the one block the four arrays share (level_reserve) */
    memset(l, 0, sizeof *l);
}
/* The four arrays live in one block (starts, ends, ids, kids, cap entries each): a level grows with
 * one allocation and one free, not four reallocations, and most levels hold a few intervals. */
static int level_reserve(Level *l, Py_ssize_t n) {
    if (n <= l->cap) return 0;
    Py_ssize_t cap = l->cap ? l->cap : 4;
    while (cap < n) cap *= 2;
    char *block = PyMem_Malloc((size_t)cap * (16 + sizeof(Str *) + sizeof(Level *)));
    if (!block) { PyErr_NoMemory(); return -1; }
    int64_t *s = (int64_t *)block, *e = s + cap;
    Str **d = (Str **)(e + cap);
    Level **k = (Level **)(d + cap);
    if (l->n) {
        memcpy(s, l->starts, l->n * 8); memcpy(e, l->ends, l->n * 8);
        memcpy(d, l->ids, l->n * sizeof(Str *)); memcpy(k, l->kids, l->n * sizeof(Level *));
    }
    PyMem_Free(l->starts);
    l->starts = s; l->ends = e; l->ids = d; l->kids = k; l->cap = cap;
    return 0;
}
/* Replaces l[i:j] with one interval (j == i inserts). */
static int level_splice(Level *l, Py_ssize_t i, Py_ssize_t j, int64_t s, int64_t e, Str *id, Level *kid) {
    Py_ssize_t delta = 1 - (j - i);
    if (level_reserve(l, l->n + delta) < 0) return -1;
    Py_ssize_t tail = l->n - j;
    memmove(l->starts + i + 1, l->starts + j, tail * 8);
    memmove(l->ends + i + 1, l->ends + j, tail * 8);
    memmove(l->ids + i + 1, l->ids + j, tail * sizeof(Str *));
    memmove(l->kids + i + 1, l->kids + j, tail * sizeof(Level *));
    l->starts[i] = s; l->ends[i] = e; l->ids[i] = str_ref(id); l->kids[i] = kid;
    l->n += delta;
    return 0;
}
static Py_ssize_t bisect_right(const int64_t *a, Py_ssize_t lo, Py_ssize_t hi, int64_t x) {
    while (lo < hi) { Py_ssize_t mid = (lo + hi) / 2; if (x < a[mid]) hi = mid; else lo = mid + 1; }
    return lo;
}
static Py_ssize_t bisect_left(const int64_t *a, Py_ssize_t lo, Py_ssize_t hi, int64_t x) {
    while (lo < hi) { Py_ssize_t mid = (lo + hi) / 2; if (a[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
}

typedef struct Enc Enc;
static int is_ancestor(Enc *e, Str *ancestor, Str *span);
/* Lane.insert; 1 placed, 0 does not nest, -1 error. A NULL span nests by times alone. */
static int lane_insert(Enc *e, Lane *lane, int64_t start, int64_t end, Str *span) {
    if (start < lane->pruned_before) return 0;
    Level *level = &lane->root;
    if (!level->n || level->ends[level->n - 1] <= start) {
        if (level_splice(level, level->n, level->n, start, end, span, NULL) < 0) return -1;
        goto placed;
    }
    for (;;) {
        Py_ssize_t i = bisect_right(level->ends, 0, level->n, start);
        Py_ssize_t j = bisect_left(level->starts, i, level->n, end);
        if (i == j) {
            if (level_splice(level, i, i, start, end, span, NULL) < 0) return -1;
            break;
        }
        if (j - i == 1 && level->starts[i] <= start && level->ends[i] >= end &&
            (!span || is_ancestor(e, level->ids[i], span))) {
            if (!level->kids[i]) {
                level->kids[i] = PyMem_Calloc(1, sizeof(Level));
                if (!level->kids[i]) { PyErr_NoMemory(); return -1; }
            }
            level = level->kids[i];
            continue;
        }
        if (level->starts[i] < start || level->ends[j - 1] > end) return 0;
        if (span)
            for (Py_ssize_t k = i; k < j; k++)
                if (!is_ancestor(e, span, level->ids[k])) return 0;
        Level *adopted = PyMem_Calloc(1, sizeof(Level));
        if (!adopted || level_reserve(adopted, j - i) < 0) { PyMem_Free(adopted); PyErr_NoMemory(); return -1; }
        Py_ssize_t m = j - i;
        memcpy(adopted->starts, level->starts + i, m * 8);
        memcpy(adopted->ends, level->ends + i, m * 8);
        memcpy(adopted->ids, level->ids + i, m * sizeof(Str *));   /* references move */
        memcpy(adopted->kids, level->kids + i, m * sizeof(Level *));
        adopted->n = m;
        for (Py_ssize_t k = i; k < j; k++) level->ids[k] = NULL;  /* moved, not released */
        if (level_splice(level, i, j, start, end, span, adopted) < 0) return -1;
        break;
    }
placed:
    lane->count++;
    if (end > lane->max_end) lane->max_end = end;
    return 1;
}
static Py_ssize_t subtree_size(Level *l) {
    if (!l) return 0;
    Py_ssize_t t = l->n;
    for (Py_ssize_t i = 0; i < l->n; i++) t += subtree_size(l->kids[i]);
    return t;
}
static void lane_prune(Lane *lane, int64_t cutoff) {
    Level *level = &lane->root;
    Py_ssize_t removed = 0;
    int64_t gone = lane->pruned_before;
    while (level) {
        Py_ssize_t k = bisect_left(level->ends, 0, level->n, cutoff);
        if (k) {
            if (level->ends[k - 1] > gone) gone = level->ends[k - 1];
            removed += k;
            for (Py_ssize_t i = 0; i < k; i++) {
                removed += subtree_size(level->kids[i]);
                level_release(level->kids[i]);
                str_unref(level->ids[i]);
            }
            Py_ssize_t tail = level->n - k;
            memmove(level->starts, level->starts + k, tail * 8);
            memmove(level->ends, level->ends + k, tail * 8);
            memmove(level->ids, level->ids + k, tail * sizeof(Str *));
            memmove(level->kids, level->kids + k, tail * sizeof(Level *));
            level->n = tail;
        }
        if (!level->n || level->starts[0] >= cutoff) break;
        level = level->kids[0];
    }
    lane->count -= removed;
    lane->pruned_before = gone;
}
static void lane_shorten(Lane *lane, int64_t horizon, Py_ssize_t max_intervals, Py_ssize_t step) {
    lane_prune(lane, lane->max_end - horizon);
    Py_ssize_t target = max_intervals * 3 / 4;
    while (lane->count > target && horizon > 0) {
        horizon /= 2;
        lane_prune(lane, lane->max_end - horizon);
    }
    Py_ssize_t a = lane->count + 1, b = lane->count + step;
    if (b > max_intervals) b = max_intervals;
    lane->next_prune = a > b ? a : b;
}

/* ===== tracks.Track ========================================================================= */
enum { TK_PROCESS, TK_THREAD, TK_GROUP, TK_NAMED, TK_SESSION, TK_TASK, TK_STEPS, TK_ASYNC, TK_COUNTER };
#define HORIZON_NS (600LL * 1000000000LL)
#define MAX_INTERVALS 50000
#define PRUNE_STEP (MAX_INTERVALS / 8)
#define RANK_COUNTER 1000
#define RANK_STEPS 10000
#define RANK_THREAD 100000
#define RANK_TIMED 200000000LL

typedef struct Track {
    Py_ssize_t rc;
    uint64_t uuid;
    char *name; Py_ssize_t name_n;
    struct Track *parent, *overflow;
    int kind, described, number, has_sort, has_pid, has_labels;
    int64_t rank, pid, tid, sort_index;
    char *labels; Py_ssize_t labels_n;
    Lane *lane;
    int in_counters;
    /* the packet writer's: uuid as a varint, made when first written (uvn 0: not yet) */
    char uvar[16]; int uvn;
} Track;

static Track *track_ref(Track *t) { if (t) t->rc++; return t; }
static void track_unref(Track *t) {
    while (t && --t->rc == 0) {
        Track *parent = t->parent;
        if (t->overflow) track_unref(t->overflow);
        if (t->lane) { level_free(&t->lane->root); PyMem_Free(t->lane); }
        PyMem_Free(t->name); PyMem_Free(t->labels); PyMem_Free(t);
        t = parent;
    }
}
static void track_unref_v(void *t) { track_unref((Track *)t); }
static int set_text(char **dst, Py_ssize_t *dn, const char *s, Py_ssize_t n) {
    char *p = PyMem_Malloc(n + 1);
    if (!p) { PyErr_NoMemory(); return -1; }
    memcpy(p, s, n); p[n] = 0;
    PyMem_Free(*dst);
    *dst = p; *dn = n;
    return 0;
}
static Track *track_new(uint64_t uuid, const char *name, Py_ssize_t n, Track *parent, int kind, int64_t rank) {
    Track *t = PyMem_Calloc(1, sizeof(Track));
    if (!t) { PyErr_NoMemory(); return NULL; }
    t->rc = 1; t->uuid = uuid; t->parent = track_ref(parent); t->kind = kind; t->rank = rank; t->number = 1;
    if (set_text(&t->name, &t->name_n, name, n) < 0) { track_unref(t); return NULL; }
    return t;
}
/* Track.take; 1 placed (at *s, *e), 0 not, -1 error. tried: the exact interval was just refused by
 * this lane, unchanged since (a refused insert changes nothing), so it is not tried again. */
static int track_take(Enc *e, Track *t, int64_t start, int64_t end, int64_t slack, Str *span,
                      int64_t *ps, int64_t *pe, int tried) {
    if (!t->lane) {
        t->lane = PyMem_Calloc(1, sizeof(Lane));
        if (!t->lane) { PyErr_NoMemory(); return -1; }
        t->lane->pruned_before = INT64_MIN;  /* lanes.Lane: nothing forgotten, any start comes in */
        t->lane->next_prune = MAX_INTERVALS / 5 > 8 ? MAX_INTERVALS / 5 : 8;
    }
    Lane *lane = t->lane;
    int r = tried ? 0 : lane_insert(e, lane, start, end, span);
    if (r < 0) return -1;
    if (r) { *ps = start; *pe = end; }
    else {
        if (!slack) return 0;
        if (end - start > 2 * slack && (r = lane_insert(e, lane, start + slack, end - slack, span)) != 0) {
            if (r < 0) return -1;
            *ps = start + slack; *pe = end - slack;
        } else {
            if (r < 0) return -1;
            r = lane_insert(e, lane, start - slack, end + slack, span);
            if (r <= 0) return r;
            *ps = start - slack; *pe = end + slack;
        }
    }
    if (lane->count >= lane->next_prune) lane_shorten(lane, HORIZON_NS, MAX_INTERVALS, PRUNE_STEP);
    return 1;
}
/* Track.descriptor */
static int track_descriptor(Track *t, Buf *b) {
    if (buf_vfield(b, T_UUID, t->uuid) < 0) return -1;
    if (t->parent && buf_vfield(b, T_PARENT, t->parent->uuid) < 0) return -1;
    Buf m = {0};
    int rc = -1;
    if (t->kind == TK_PROCESS) {
        if (buf_vfield(&m, 1, (uint64_t)t->pid) < 0) goto done;
        if (t->name_n && buf_lfield(&m, 6, t->name, t->name_n) < 0) goto done;
        if (t->has_sort && buf_vfield(&m, 3, (uint64_t)t->sort_index) < 0) goto done;
        if (t->has_labels && t->labels_n && buf_lfield(&m, 8, t->labels, t->labels_n) < 0) goto done;
        if (buf_lfield(b, T_PROCESS, m.p, m.n) < 0 || buf_vfield(b, T_ORDER, CHILD_EXPLICIT) < 0) goto done;
    } else if (t->kind == TK_THREAD) {
        if (buf_vfield(&m, 1, (uint64_t)t->pid) < 0 || buf_vfield(&m, 2, (uint64_t)t->tid) < 0 ||
            buf_lfield(&m, 5, t->name, t->name_n) < 0) goto done;
        if (t->has_sort && buf_vfield(&m, 3, (uint64_t)t->sort_index) < 0) goto done;
        if (buf_lfield(b, T_THREAD, m.p, m.n) < 0) goto done;
    } else {
        if (buf_lfield(b, T_NAME, t->name, t->name_n) < 0) goto done;
        if (t->kind == TK_COUNTER && buf_lfield(b, T_COUNTER, "", 0) < 0) goto done;
        if (t->kind == TK_GROUP && buf_vfield(b, T_ORDER, CHILD_EXPLICIT) < 0) goto done;
    }
    if (t->rank && buf_vfield(b, T_RANK, (uint64_t)t->rank) < 0) goto done;
    rc = 0;
done:
    buf_free(&m);
    return rc;
}

/* ===== slices.Record ======================================================================== */
enum { R_SLICE = 0, R_INSTANT = 1, R_BEGIN = 2, R_END = 3 };
typedef struct { int k; Str *s; uint64_t id; } Flow;  /* k: 0 none, 1 a span id, 2 an id made */
typedef struct Record {
    Py_ssize_t rc;
    int kind, attached, written;
    int64_t start, end;
    Track *track;
    char *body; Py_ssize_t body_n;
    char *parent_part; Py_ssize_t parent_part_n;
    int inline_bytes;  /* body and parent_part lie in the record's own allocation (a slice's) */
    Str *span, *parent;
    Flow flow_out, flow_in;
    struct Record **before; Py_ssize_t nbefore, before_cap;
} Record;

static Record *rec_ref(Record *r) { if (r) r->rc++; return r; }
static void rec_unref(Record *r);
static void rec_drop_bytes(Record *r) {
    if (!r->inline_bytes) { PyMem_Free(r->body); PyMem_Free(r->parent_part); }
    r->body = NULL; r->body_n = 0;
    r->parent_part = NULL; r->parent_part_n = 0;
}
static void rec_clear_before(Record *r) {
    for (Py_ssize_t i = 0; i < r->nbefore; i++) rec_unref(r->before[i]);
    PyMem_Free(r->before); r->before = NULL; r->nbefore = r->before_cap = 0;
}
static void rec_unref(Record *r) {
    if (!r || --r->rc) return;
    track_unref(r->track);
    rec_drop_bytes(r);
    str_unref(r->span); str_unref(r->parent);
    str_unref(r->flow_out.s); str_unref(r->flow_in.s);
    rec_clear_before(r);
    PyMem_Free(r);
}
static void rec_unref_v(void *r) { rec_unref((Record *)r); }
static void mem_free_v(void *p) { PyMem_Free(p); }
static void str_unref_v(void *p) { str_unref((Str *)p); }

/* A value kept in a map: bytes, an int, or a Python-comparable value (a tid). */
typedef struct { Py_ssize_t n; char s[]; } Bytes;
static Bytes *bytes_new(const char *s, Py_ssize_t n) {
    Bytes *b = PyMem_Malloc(sizeof(Bytes) + n);
    if (!b) { PyErr_NoMemory(); return NULL; }
    b->n = n; copy_bytes(b->s, s, (size_t)n);
    return b;
}
/* A Val copied out of the event it came from. */
typedef struct { Val v; char text[1]; } Kept;
static Kept *kept_new(const Val *v) {
    Py_ssize_t n = (v->k == V_STR || v->k == V_ARR || v->k == V_OBJ) ? v->n : 0;
    Kept *k = PyMem_Malloc(sizeof(Kept) + n);
    if (!k) { PyErr_NoMemory(); return NULL; }
    k->v = *v;
    if (n) memcpy(k->text, v->s, n);
    k->v.s = k->text;
    return k;
}

/* One annotation cache (interning.Annotations) of one process; raw, in front of it, holds the
 * bytes of members whose (name, value) m holds, by their JSON text (no key to build), and is
 * emptied whenever m is, so a member found there is one m would give the same bytes for. */
/* memo[j]: the raw entry (its number + 1) last found for a member whose name falls in j (Member.slot:
 * its key's length and last bytes, mixed); most members repeat their last value under the same
 * name, so a comparison with that entry's key often spares the hash and the probe. It is only a hint: an entry is used
 * when its key is the member's text, and the map holds one entry a key, the one a lookup finds. */
#define RAW_MEMO 256  /* (64 slots let the names of one trace's args evict each other's hints) */
typedef struct { Map m, raw; int elide; Buf rank, role; uint32_t memo[RAW_MEMO]; } Cache;
static void cache_free_v(void *p) {
    Cache *c = p;
    map_free(&c->raw);
    map_free(&c->m); buf_free(&c->rank); buf_free(&c->role); PyMem_Free(c);
}
typedef struct { Buf rank, role; } Elided;
static void elided_free_v(void *p) { Elided *e = p; buf_free(&e->rank); buf_free(&e->role); PyMem_Free(e); }
typedef struct { uint64_t uuid; int64_t start, end; } Placed;

/* A counter track's samples, a heap on (ns, order). */
typedef struct { int64_t ns, order; char value[12]; int vn; } Sample;
typedef struct { Track *track; Sample *h; Py_ssize_t n, cap; } Counter;

/* ===== the encoder's state ================================================================== */
/* Hint slots per interning table: 64, not 16, as the names, categories and values of a trace's
 * slices are a few dozen texts, and with 16 slots they evicted each other's hints. */
#define INTERN_MEMO 64
#define LAST_HINTS 16
struct Enc {
    PyObject_HEAD
    uint64_t sequence_id, salt;
    int ann_kept;  /* whether the last annotate wrote bytes its cache holds */
    int64_t span_iid[2];  /* the iids of "span_id" and "parent_span_id" once interned, else 0 */
    uint32_t intern_memo[4][INTERN_MEMO];  /* per table: hints of entries by text (see intern_val) */
    /* PacketWriter */
    int has_base; int64_t base;
    /* TrackRegistry */
    uint64_t count;
    Map processes, threads; TwoGen timed; Track *global;
    Track **renamed; Py_ssize_t nrenamed, renamed_cap;
    /* Interner */
    Map names, categories, keys, strings, caches, inline_;
    int64_t next[4], icount, max_entries;
    Buf pending;
    /* SliceWindow */
    Py_ssize_t size;
    Record **fifo; Py_ssize_t fhead, fn, fcap;
    Map by_span, starts, by_start; int has_by_start;
    TwoGen awaiting, sources, written;
    /* PerfettoEncoder */
    Counter *counters; Py_ssize_t ncounters, counters_cap; int64_t counter_order;
    Map last, async_, own, lanes, first_lanes, elided;
    uint32_t last_hint[LAST_HINTS];  /* h_slice's hints of last's entries (see there) */
    TwoGen parents;
    /* own_track's last answer, for plain int pid/tid/id (see own_track); t NULL: none */
    struct { Track *t; int tk, id_null; int64_t pid, tid, id; } own_memo;
    /* while h_slice places a slice: its span and the parent it just stored for it in parents (the
     * answer is_ancestor's first step would look up); NULL otherwise */
    Str *hot_span, *hot_parent;
    int has_first; int64_t first_ns; int started;
    long long events, skipped;
    /* scratch */
    Arena arena; Event ev; Buf key, key2, body, text, ids, tidkey;
    PyObject *mapping;  /* lines mode: pid -> pid written */
    /* the packet writer's: the tail of every track event packet, and a descriptor's scratch */
    char wtail[16]; int wtail_n; Buf wdesc;
};

typedef struct { Py_ssize_t n, cap; Record **r; } RecList;
static void reclist_free_v(void *p) {
    RecList *l = p;
    if (!l) return;
    for (Py_ssize_t i = 0; i < l->n; i++) rec_unref(l->r[i]);
    PyMem_Free(l->r);
    PyMem_Free(l);
}

/* lanes.is_ancestor: whether ancestor is span or one of its ancestors (64 generations). */
static int is_ancestor(Enc *e, Str *ancestor, Str *span) {
    for (int i = 0; i < 64; i++) {
        if (str_eq(span, ancestor)) return 1;
        if (!span) return 0;
        span = span == e->hot_span ? e->hot_parent : tg_get_h(&e->parents, SKEY(span));
        if (!span || !span->n) return 0;
    }
    return 0;
}

/* ===== tracks.TrackRegistry ================================================================= */
static uint64_t new_uuid(Enc *e) { e->count++; return (e->salt + e->count) & 0x7FFFFFFFFFFFFFFFULL; }
static int valid_pid(const Val *pid) { return pid->k == V_INT && pid->i > 0 && pid->i <= INT32_MAXV; }

static Track *reg_process(Enc *e, const Val *pid) {
    Buf *k = &e->key; k->n = 0;
    if (key_val(k, pid) < 0) return NULL;
    Track *t = map_get(&e->processes, k);
    if (t) return t;
    if (valid_pid(pid)) {
        t = track_new(new_uuid(e), "", 0, NULL, TK_PROCESS, 0);
        if (t) { t->pid = pid->i; t->has_pid = 1; }
    } else {
        e->text.n = 0;
        if (pystr(&e->text, pid) < 0) return NULL;
        t = track_new(new_uuid(e), e->text.p, e->text.n, NULL, TK_GROUP, 0);
    }
    if (!t) return NULL;
    if (e->processes.n >= 100000) map_clear(&e->processes);
    k->n = 0;
    if (key_val(k, pid) < 0 || map_set(&e->processes, k, t) < 0) return NULL;
    return t;
}
static Track *reg_thread(Enc *e, const Val *pid, const Val *tid) {
    Buf *k = &e->key; k->n = 0;
    if (key_val(k, pid) < 0 || key_val(k, tid) < 0) return NULL;
    Track *t = map_get(&e->threads, k);
    if (t) return t;
    Track *process = reg_process(e, pid);
    if (!process) return NULL;
    e->text.n = 0;
    if (process->kind == TK_PROCESS && tid->k == V_INT && tid->i > 0) {
        char tmp[40];
        t = track_new(new_uuid(e), tmp, snprintf(tmp, sizeof tmp, "thread %lld", (long long)tid->i), process,
                      TK_THREAD, RANK_THREAD);
        if (t) { t->pid = pid->i; t->tid = tid->i; t->has_pid = 1; }
    } else {
        if (pystr(&e->text, tid) < 0) return NULL;
        t = track_new(new_uuid(e), e->text.p, e->text.n, process, TK_NAMED, RANK_THREAD);
    }
    if (!t) return NULL;
    if (e->threads.n >= 100000) map_clear(&e->threads);
    k->n = 0;
    if (key_val(k, pid) < 0 || key_val(k, tid) < 0 || map_set(&e->threads, k, t) < 0) return NULL;
    return t;
}
static int reg_changed(Enc *e, Track *t) {
    if (!t->described) return 0;
    t->described = 0;
    if (e->nrenamed == e->renamed_cap) {
        Py_ssize_t cap = e->renamed_cap ? e->renamed_cap * 2 : 16;
        Track **p = PyMem_Realloc(e->renamed, cap * sizeof(Track *));
        if (!p) { PyErr_NoMemory(); return -1; }
        e->renamed = p; e->renamed_cap = cap;
    }
    e->renamed[e->nrenamed++] = track_ref(t);
    return 0;
}
static int is_plain_int(const Val *v) { return v && v->k == V_INT; }
static int reg_name_process(Enc *e, const Val *pid, const Val *name, const Val *labels, const Val *sort) {
    Track *t = reg_process(e, pid);
    if (!t) return -1;
    if (name && name->k != V_ABSENT && name->k != V_NULL) {
        e->text.n = 0;
        if (pystr(&e->text, name) < 0 || set_text(&t->name, &t->name_n, e->text.p, e->text.n) < 0) return -1;
    }
    if (labels && labels->k != V_ABSENT && labels->k != V_NULL) {
        e->text.n = 0;
        if (pystr(&e->text, labels) < 0 || set_text(&t->labels, &t->labels_n, e->text.p, e->text.n) < 0) return -1;
        t->has_labels = 1;
    }
    if (is_plain_int(sort) && sort->i >= -INT32_MAXV && sort->i <= INT32_MAXV) {
        t->sort_index = sort->i; t->has_sort = 1;
    }
    return reg_changed(e, t);
}
static int reg_name_thread(Enc *e, const Val *pid, const Val *tid, const Val *name, const Val *sort) {
    Track *t = reg_thread(e, pid, tid);
    if (!t) return -1;
    if (name && name->k != V_ABSENT && name->k != V_NULL) {
        e->text.n = 0;
        if (pystr(&e->text, name) < 0 || set_text(&t->name, &t->name_n, e->text.p, e->text.n) < 0) return -1;
    }
    if (is_plain_int(sort) && sort->i >= 0 && sort->i <= INT32_MAXV - RANK_THREAD) {
        t->sort_index = sort->i; t->has_sort = 1; t->rank = RANK_THREAD + sort->i;
    }
    return reg_changed(e, t);
}
static Track *reg_global(Enc *e) {
    if (!e->global) e->global = track_new(new_uuid(e), "global", 6, NULL, TK_NAMED, 0);
    return e->global;
}
/* TrackRegistry.timed, the key (pid,) + key already in e->key2... built by the caller in kbuf. */
static Track *reg_timed(Enc *e, const Buf *full, const Val *pid, const char *name, Py_ssize_t n,
                        int64_t rank_ms, int kind) {
    Track *t = tg_get(&e->timed, full);
    if (t) return t;
    int64_t rank;
    if (kind == TK_STEPS) rank = RANK_STEPS;
    else {
        int64_t ms = rank_ms < 0 ? 0 : rank_ms;
        if (ms > INT32_MAXV - RANK_TIMED) ms = INT32_MAXV - RANK_TIMED;
        rank = RANK_TIMED + ms;
    }
    uint64_t uuid = new_uuid(e);
    Buf saved = {0};
    if (buf_put(&saved, full->p, full->n) < 0) return NULL;  /* reg_process reuses e->key */
    Track *process = reg_process(e, pid);
    if (!process) { buf_free(&saved); return NULL; }
    t = track_new(uuid, name, n, process, kind, rank);
    if (!t || tg_set(&e->timed, &saved, t) < 0) { buf_free(&saved); return NULL; }
    buf_free(&saved);
    return t;
}
static Track *reg_counter(Enc *e, const Val *pid, const char *name, Py_ssize_t n) {
    Buf k = {0};
    Track *t = NULL;
    if (buf_byte(&k, 3) < 0 || key_text(&k, "counter", 7) < 0 || key_val(&k, pid) < 0 || key_text(&k, name, n) < 0)
        goto done;
    t = tg_get(&e->timed, &k);
    if (t) goto done;
    uint64_t uuid = new_uuid(e);
    Track *process = reg_process(e, pid);
    if (!process) goto done;
    t = track_new(uuid, name, n, process, TK_COUNTER, RANK_COUNTER);
    if (t && tg_set(&e->timed, &k, t) < 0) t = NULL;
done:
    buf_free(&k);
    return t;
}
static Track *reg_overflow(Enc *e, Track *t) {
    if (!t->overflow) {
        int number = t->number + 1;
        Py_ssize_t base = t->name_n;
        if (t->number > 1) {
            for (Py_ssize_t i = t->name_n - 2; i >= 0; i--)
                if (t->name[i] == ' ' && t->name[i + 1] == '(') { base = i; break; }
        }
        Buf name = {0};
        char tmp[24];
        if (buf_put(&name, t->name, base) < 0 || buf_put(&name, tmp, snprintf(tmp, sizeof tmp, " (%d)", number)) < 0) {
            buf_free(&name); return NULL;
        }
        Track *parent = t->kind != TK_PROCESS ? t->parent : t;
        int kind = (t->kind == TK_THREAD || t->kind == TK_PROCESS || t->kind == TK_GROUP) ? TK_NAMED : t->kind;
        Track *spill = track_new(new_uuid(e), name.p ? name.p : "", name.n, parent, kind, t->rank + 1);
        buf_free(&name);
        if (!spill) return NULL;
        spill->number = number;
        t->overflow = spill;
    }
    return t->overflow;
}

/* ===== packets.PacketWriter ================================================================= */
static int put_tail(Enc *e, Buf *b) {  /* trusted_packet_sequence_id, SEQ_NEEDS_INCREMENTAL_STATE */
    if (buf_vfield(b, 10, e->sequence_id) < 0) return -1;
    return buf_vfield(b, 13, 2);
}
static int frame(Buf *out, const char *body, Py_ssize_t n) {
    if (buf_byte(out, F_PACKET_KEY) < 0 || buf_varint(out, (uint64_t)n) < 0) return -1;
    return buf_put(out, body, n);
}
static int w_cleared(Enc *e, Buf *out) {
    uint64_t base = e->has_base ? (uint64_t)e->base : 0;
    Buf c = {0}, clocks = {0}, body = {0};
    int rc = -1;
    if (buf_vfield(&c, 1, 64) < 0 || buf_vfield(&c, 2, 0) < 0 || buf_lfield(&clocks, 1, c.p, c.n) < 0) goto done;
    c.n = 0;
    if (buf_vfield(&c, 1, 1) < 0 || buf_vfield(&c, 2, base) < 0 || buf_lfield(&clocks, 1, c.p, c.n) < 0) goto done;
    if (buf_vfield(&clocks, 2, 1) < 0) goto done;
    c.n = 0;
    if (buf_vfield(&c, 58, 64) < 0) goto done;
    if (buf_vfield(&body, 10, e->sequence_id) < 0 || buf_vfield(&body, 13, 1) < 0 ||
        buf_lfield(&body, 59, c.p, c.n) < 0 || buf_lfield(&body, 6, clocks.p, clocks.n) < 0) goto done;
    rc = frame(out, body.p, body.n);
done:
    buf_free(&c); buf_free(&clocks); buf_free(&body);
    return rc;
}
static int w_start(Enc *e, Buf *out, int64_t first_ns) {
    int64_t base = first_ns - (1LL << 43);
    e->base = base > 0 ? base : 0;
    e->has_base = 1;
    return w_cleared(e, out);
}
/* A varint at p, which has room for 16 bytes: up to 56 bits are spread into eight 7-bit groups
 * by three shift-and-mask steps and stored at once (the stamps written take 7 bytes, the uuids 9),
 * instead of a loop over the bytes; the bytes past the varint's end are zeros, overwritten next. */
static ALWAYS_INLINE int put_varint_fast(char *p, uint64_t v) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (v < 0x80) { *p = (char)v; return 1; }
    if (v < 0x4000) { p[0] = (char)(v | 0x80); p[1] = (char)(v >> 7); return 2; }  /* most lengths */
    uint64_t x = v & 0x00FFFFFFFFFFFFFFULL, hi = v >> 56;
    x = (x & 0x000000000FFFFFFFULL) | ((x << 4) & 0x0FFFFFFF00000000ULL);  /* 28 bits a 32-bit lane */
    x = (x & 0x00003FFF00003FFFULL) | ((x << 2) & 0x3FFF00003FFF0000ULL);  /* 14 a 16-bit lane */
    x = (x & 0x007F007F007F007FULL) | ((x << 1) & 0x7F007F007F007F00ULL);  /* 7 a byte */
    if (!hi) {
        int n = varint_len(v);  /* 2 to 8: a continuation bit on all but the last */
        x |= 0x8080808080808080ULL >> (8 * (9 - n));
        memcpy(p, &x, 8);
        return n;
    }
    x |= 0x8080808080808080ULL;
    memcpy(p, &x, 8);
    if (hi < 0x80) { p[8] = (char)hi; return 9; }
    p[8] = (char)hi; p[9] = 1;  /* hi is 0x80 | its low 7 bits already */
    return 10;
#else
    return put_varint_raw(p, v);
#endif
}
/* The tail every track event packet ends with (trusted_packet_sequence_id, sequence_flags
 * SEQ_NEEDS_INCREMENTAL_STATE): the same bytes each time, made once. */
static ALWAYS_INLINE const char *w_tail_bytes(Enc *e) {
    if (UNLIKELY(!e->wtail_n)) {
        int n = 0;
        e->wtail[n++] = 10 << 3;
        n += put_varint_raw(e->wtail + n, e->sequence_id);
        e->wtail[n++] = 13 << 3; e->wtail[n++] = 2;
        e->wtail_n = n;
    }
    return e->wtail;
}
#define W_SLACK 48  /* room past a packet's bytes: the fixed-size stores below may write that far */
/* The head of the track event packet at ns whose event takes evn bytes, written to out with room
 * made for the whole packet: where the event's bytes go (w_close then ends the packet). All sizes
 * are known before a byte is written, so nothing is staged and copied again. */
static ALWAYS_INLINE char *w_open(Enc *e, Buf *out, int64_t ns, Py_ssize_t evn) {
    w_tail_bytes(e);
    int64_t relative = ns - e->base;
    uint64_t stamp = relative >= 0 ? (uint64_t)relative : (uint64_t)ns;
    Py_ssize_t sn = 1 + varint_len(stamp) + (relative >= 0 ? 0 : 3);
    Py_ssize_t body = sn + 1 + varint_len((uint64_t)evn) + evn + e->wtail_n;
    if (out->n + body + W_SLACK > out->cap && buf_grow(out, body + W_SLACK) < 0) return NULL;
    char *p = out->p + out->n;
    *p++ = F_PACKET_KEY;
    p += put_varint_fast(p, (uint64_t)body);
    *p++ = F_TIMESTAMP_KEY;
    p += put_varint_fast(p, stamp);
    if (relative < 0) { *p++ = (char)0xD0; *p++ = 0x03; *p++ = 0x01; }
    *p++ = F_TRACK_EVENT_KEY;
    p += put_varint_fast(p, (uint64_t)evn);
    return p;
}
static ALWAYS_INLINE void w_close(Enc *e, Buf *out, char *p) {
    memcpy(p, e->wtail, 16);  /* (a fixed size: a few moves; wtail_n <= 13) */
    out->n = p + e->wtail_n - out->p;
}
static int w_event(Enc *e, Buf *out, int64_t ns, const char *ev, Py_ssize_t evn) {
    char *p = w_open(e, out, ns, evn);
    if (!p) return -1;
    if (evn > 0) memcpy(p, ev, (size_t)evn);
    w_close(e, out, p + evn);
    return 0;
}
/* TrackDescriptor packets: the descriptor built in a scratch buffer kept from one to the next,
 * then framed straight into out. */
static int w_descriptor(Enc *e, Buf *out, Track *t) {
    Buf *d = &e->wdesc;
    d->n = 0;
    if (track_descriptor(t, d) < 0) return -1;
    Py_ssize_t body = 2 + varint_len((uint64_t)d->n) + d->n + 1 + varint_len(e->sequence_id);
    BUF_NEED(out, body + W_SLACK);
    char *p = out->p + out->n;
    *p++ = F_PACKET_KEY;
    p += put_varint_fast(p, (uint64_t)body);
    *p++ = (char)0xE2; *p++ = 0x03;  /* field 60, length-delimited */
    p += put_varint_fast(p, (uint64_t)d->n);
    if (d->n > 0) memcpy(p, d->p, (size_t)d->n);
    p += d->n;
    *p++ = 10 << 3;
    p += put_varint_fast(p, e->sequence_id);
    out->n = p - out->p;
    return 0;
}
/* TrackRegistry.describe: the descriptors track needs (its parent's first), written as packets. */
static int reg_describe(Enc *e, Track *t, Buf *out) {
    if (t->described && (!t->parent || t->parent->described)) return 0;
    Track *chain[64];
    int n = 0;
    for (Track *node = t; node; node = node->parent)
        if (!node->described && n < 64) chain[n++] = node;
    for (int i = n - 1; i >= 0; i--) {
        chain[i]->described = 1;
        if (w_descriptor(e, out, chain[i]) < 0) return -1;
    }
    return 0;
}
/* type and track_uuid of a track event at p (room for 19 bytes): its length. */
static ALWAYS_INLINE int type_track_at(char *p, int type, Track *t) {
    p[0] = 0x48; p[1] = (char)type; p[2] = F_TRACK_UUID_KEY;
    if (UNLIKELY(!t->uvn)) t->uvn = put_varint_fast(t->uvar, t->uuid);
    memcpy(p + 3, t->uvar, 16);  /* (a fixed size: a few moves; the rest is room the caller made) */
    return 3 + t->uvn;
}
static int put_type_track(Buf *b, int type, Track *t) {
    BUF_NEED(b, 24);  /* (type_track_at stores 19 bytes) */
    b->n += type_track_at(b->p + b->n, type, t);
    return 0;
}
/* A flow id (direction 2 out, 1 in) at p (room for 16 bytes): its length, -1 on failure. */
static int flow_at(char *p, const Flow *f, int direction) {
    uint64_t id = f->id;
    if (f->k == 1 && flow_id_text(f->s->s, f->s->n, &id) < 0) return -1;
    int n = 2;
    p[n++] = 0x40;
    n += put_varint_raw(p + n, id);
    p[n++] = 0x68; p[n++] = (char)direction;
    p[0] = 0x32; p[1] = (char)(n - 2);
    return n;
}
/* A record's packets, straight into out: its parts' sizes first, then its bytes. */
static int w_record(Enc *e, Buf *out, Record *r) {
    char tt[24] = {0}, fl[16] = {0};  /* (room for type_track_at's fixed-size store) */
    int tn = type_track_at(tt, r->kind == R_INSTANT ? TYPE_INSTANT : r->kind == R_END ? TYPE_SLICE_END : TYPE_SLICE_BEGIN,
                           r->track), fn = 0;
    Py_ssize_t bn = r->kind == R_END ? 0 : r->body_n, pn = r->kind == R_SLICE ? r->parent_part_n : 0;
    if (r->kind == R_SLICE && r->flow_out.k && (fn = flow_at(fl, &r->flow_out, 2)) < 0) return -1;
    char *p = w_open(e, out, r->start, tn + bn + pn + fn);
    if (!p) return -1;
    memcpy(p, tt, 16); p += tn;
    if (bn > 0) { memcpy(p, r->body, (size_t)bn); p += bn; }
    if (pn > 0) { copy_bytes(p, r->parent_part, (size_t)pn); p += pn; }
    memcpy(p, fl, 16); p += fn;
    w_close(e, out, p);
    if (r->kind != R_SLICE) return 0;
    tt[1] = TYPE_SLICE_END;
    fn = 0;
    if (r->flow_in.k && (fn = flow_at(fl, &r->flow_in, 1)) < 0) return -1;
    if (!(p = w_open(e, out, r->end, tn + fn))) return -1;
    memcpy(p, tt, 16); p += tn;
    memcpy(p, fl, 16); p += fn;
    w_close(e, out, p);
    return 0;
}

/* ===== interning.Interner =================================================================== */
enum { TBL_CATEGORIES, TBL_NAMES, TBL_KEYS, TBL_STRINGS };
static const int interned_field[4] = {1, 2, 3, 29};
#define LONG_STRING 128

static int64_t intern_entry(Enc *e, int table, const char *text, Py_ssize_t n) {
    int64_t iid = e->next[table]++;
    e->icount++;
    /* the entry (iid = 1, text = 2) is written in place: its length is known beforehand */
    Py_ssize_t len = 1 + varint_len((uint64_t)iid) + 1 + varint_len((uint64_t)n) + n;
    Buf *b = &e->pending;
    if (buf_varint(b, ((uint64_t)interned_field[table] << 3) | 2) < 0 || buf_varint(b, (uint64_t)len) < 0 ||
        buf_vfield(b, 1, (uint64_t)iid) < 0 || buf_lfield(b, 2, text, n) < 0) return -1;
    return iid;
}
/* Interner._field: the iid naming the value v in table (interned on first use). */
/* A string's hint: the table's entry (its number + 1) last found for a text of its shape (length and
 * two bytes). Names and categories repeat from event to event; the entry's key is compared with
 * the text in place (its key is 's', the length, the text), sparing the key, the hash and the probe.
 * Only a hint: a table holds one entry a key, so an entry whose key matches is the one to find. */
static ALWAYS_INLINE uint32_t *intern_hint(Enc *e, int index, const Val *v) {
    if (v->k != V_STR || !v->n) return NULL;
    size_t j = (size_t)v->n * 7 + (unsigned char)v->s[v->n - 1] * 3 + (unsigned char)v->s[v->n / 2];
    return &e->intern_memo[index][j & (INTERN_MEMO - 1)];
}
static int64_t intern_val(Enc *e, Map *table, int index, const Val *v) {
    uint32_t *hint = intern_hint(e, index, v);
    if (hint && *hint && *hint <= table->n) {
        const Entry *en = &table->en[*hint - 1];
        if (en->kn == STR_KEY_HEAD + (size_t)v->n) {
            const char *ek = ENTRY_KEY(en);
            if (ek[0] == 's' && bytes_eq(ek + STR_KEY_HEAD, v->s, (size_t)v->n)) return (int64_t)(intptr_t)en->v;
        }
    }
    Buf *k = &e->key; k->n = 0;
    if (key_val(k, v) < 0) return -1;
    uint64_t h = hash_bytes(k->p, (size_t)k->n);
    uint64_t *slot = map_slot(table, k->p, (size_t)k->n, h);
    if (slot) {
        if (hint) *hint = (uint32_t)*slot;
        return (int64_t)(intptr_t)table->en[(uint32_t)*slot - 1].v;
    }
    e->text.n = 0;
    if (v->k == V_STR) { if (buf_put(&e->text, v->s, v->n) < 0) return -1; }
    else if (v->k != V_NULL && v->k != V_ABSENT && pystr(&e->text, v) < 0) return -1;
    int64_t iid = intern_entry(e, index, e->text.p ? e->text.p : "", e->text.n);
    if (iid < 0) return -1;
    /* k still holds the key: the text and the entry are written elsewhere (e->text, e->pending) */
    if (map_set_h(table, k->p, (size_t)k->n, h, (void *)(intptr_t)iid) < 0) return -1;
    if (hint) *hint = (uint32_t)table->n;  /* the entry just added is the last */
    return iid;
}
static ALWAYS_INLINE int64_t intern_key(Enc *e, const char *s, Py_ssize_t n) {
    /* The two names every slice's span ids are written under: their iids are remembered until
     * the interned state is cleared (a name once interned keeps its iid until then). */
    int slot = n == 7 && memcmp(s, "span_id", 7) == 0 ? 0 : n == 14 && memcmp(s, "parent_span_id", 14) == 0 ? 1 : -1;
    if (slot >= 0 && e->span_iid[slot] > 0) return e->span_iid[slot];
    Val v = {V_STR}; v.s = s; v.n = n;
    int64_t iid = intern_val(e, &e->keys, TBL_KEYS, &v);
    if (slot >= 0 && iid > 0) e->span_iid[slot] = iid;
    return iid;
}
static int put_iid_field(Buf *b, int key, int64_t iid) {
    if (iid < 0 || buf_byte(b, (unsigned char)key) < 0) return -1;
    return buf_varint(b, (uint64_t)iid);
}
static int name_field(Enc *e, Buf *b, const Val *v) { return put_iid_field(b, F_NAME_IID_KEY, intern_val(e, &e->names, TBL_NAMES, v)); }
static int category_field(Enc *e, Buf *b, const Val *v) {
    return put_iid_field(b, F_CATEGORY_IID_KEY, intern_val(e, &e->categories, TBL_CATEGORIES, v));
}
/* An annotation named name: the name part (interned), then value part vp. */
static int annotation(Enc *e, Buf *b, const char *name, Py_ssize_t nn, const char *vp, Py_ssize_t vn) {
    int64_t iid = intern_key(e, name, nn);
    if (iid < 0) return -1;
    char head[12];
    int hn = 0;
    head[hn++] = A_NAME_IID << 3;
    hn += put_varint_raw(head + hn, (uint64_t)iid);
    if (buf_byte(b, F_ANNOTATION_KEY) < 0 || buf_varint(b, (uint64_t)(hn + vn)) < 0) return -1;
    if (buf_put(b, head, hn) < 0) return -1;
    return buf_put(b, vp, vn);
}
/* An annotation holding text in place (string_value, the annotation's field 6). */
static int annotation_text(Enc *e, Buf *b, const char *name, Py_ssize_t nn, const char *s, Py_ssize_t n) {
    Buf v = {0};
    int rc = buf_lfield(&v, A_STRING, s, n);
    if (rc == 0) rc = annotation(e, b, name, nn, v.p, v.n);
    buf_free(&v);
    return rc;
}
/* Interner.inline_prefix + the text: an ASCII string annotation of fewer than 128 characters. */
static int annotation_inline(Enc *e, Buf *b, const char *name, Py_ssize_t nn, const char *s, Py_ssize_t n) {
    char vp[4];
    int vn = 0;
    vp[vn++] = (A_STRING << 3) | 2;
    vp[vn++] = (char)n;
    int64_t iid = intern_key(e, name, nn);
    if (iid < 0) return -1;
    char head[12];
    int hn = 0;
    head[hn++] = A_NAME_IID << 3;
    hn += put_varint_raw(head + hn, (uint64_t)iid);
    if (buf_byte(b, F_ANNOTATION_KEY) < 0 || buf_varint(b, (uint64_t)(hn + vn + n)) < 0) return -1;
    if (buf_put(b, head, hn) < 0 || buf_put(b, vp, vn) < 0) return -1;
    return buf_put(b, s, n);
}
/* Interner.span_annotation */
static ALWAYS_INLINE int span_annotation(Enc *e, Buf *b, const char *name, Py_ssize_t nn, const Str *span) {
    if (span->ascii && span->n < 128) {
        /* annotation_inline's bytes, written in one step: its name is interned first as there */
        int64_t iid = intern_key(e, name, nn);
        if (iid < 0) return -1;
        Py_ssize_t len = 1 + varint_len((uint64_t)iid) + 2 + span->n;
        BUF_NEED(b, 3 + len);
        char *p = b->p + b->n;
        *p++ = F_ANNOTATION_KEY;
        p += put_varint_raw(p, (uint64_t)len);
        *p++ = A_NAME_IID << 3;
        p += put_varint_raw(p, (uint64_t)iid);
        *p++ = (A_STRING << 3) | 2; *p++ = (char)span->n;
        copy_bytes(p, span->s, (size_t)span->n);
        b->n = p + span->n - b->p;
        return 0;
    }
    Val v = {V_STR}; v.s = span->s; v.n = span->n; v.ascii = span->ascii;
    Py_ssize_t chars = utf8_chars(&v);
    if (chars < 128 && intern_key(e, name, nn) < 0) return -1;  /* inline_prefix names it first */
    if (chars < 128 && v.ascii) return annotation_inline(e, b, name, nn, span->s, span->n);
    return annotation_text(e, b, name, nn, span->s, span->n);
}
/* interning.scalar_bytes of a value that is not a string; 0 written, 1 None (nothing), -1 error. */
static int scalar_part(Buf *b, const Val *v) {
    switch (v->k) {
    case V_TRUE: case V_FALSE:
        if (buf_byte(b, A_BOOL << 3) < 0) return -1;
        return buf_byte(b, v->k == V_TRUE);
    case V_INT:
        if (buf_byte(b, A_INT << 3) < 0) return -1;
        return buf_varint(b, (uint64_t)v->i);
    case V_FLOAT:
        if (buf_byte(b, (A_DOUBLE << 3) | 1) < 0) return -1;
        return buf_put(b, &v->d, 8);
    case V_ARR: case V_OBJ: return put_helper(b, "scalar_of", v);
    default: return 1;
    }
}

/* The annotation cache of a process (Interner.annotations): made on first use with its elision. */
static Cache *cache_for(Enc *e, const Val *pid) {
    Buf *k = &e->key; k->n = 0;
    if (key_val(k, pid) < 0) return NULL;
    Cache *c = map_get(&e->caches, k);
    if (c) return c;
    c = PyMem_Calloc(1, sizeof(Cache));
    if (!c) { PyErr_NoMemory(); return NULL; }
    map_init(&c->m, mem_free_v);
    map_init(&c->raw, mem_free_v);
    Elided *el = map_get(&e->elided, k);
    if (el) {
        c->elide = 1;
        if (buf_put(&c->rank, el->rank.p, el->rank.n) < 0 || buf_put(&c->role, el->role.p, el->role.n) < 0) {
            cache_free_v(c); return NULL;
        }
    }
    if (e->caches.n >= 1024) map_clear(&e->caches);
    if (map_set(&e->caches, k, c) < 0) return NULL;
    return c;
}
/* Annotations.__getitem__ / __missing__ for one (name, value) of an event's args. */
static int annotate(Enc *e, Buf *b, Cache *c, const Val *name, const Val *value) {
    e->ann_kept = 0;
    if (value->k == V_ARR || value->k == V_OBJ) {  /* unhashable: encoded each time, never kept */
        Buf part = {0};
        int rc = scalar_part(&part, value);
        if (rc == 0) rc = annotation(e, b, name->s, name->n, part.p, part.n);
        buf_free(&part);
        return rc;
    }
    if (value->k == V_FLOAT && value->d != floor(value->d)) {
        /* Never kept, and equal to nothing that is (an int, a bool, the elided rank): encoded each time. */
        char part[9];
        part[0] = (A_DOUBLE << 3) | 1;
        memcpy(part + 1, &value->d, 8);
        return annotation(e, b, name->s, name->n, part, 9);
    }
    /* k (e->key2) is left as it is until the end: nothing called below builds a key there */
    Buf *k = &e->key2; k->n = 0;
    if (key_val(k, name) < 0 || key_val(k, value) < 0) return -1;
    uint64_t kh = hash_bytes(k->p, (size_t)k->n);
    Bytes *hit = map_get_h(&c->m, k->p, (size_t)k->n, kh);
    if (hit) { e->ann_kept = 1; return buf_put(b, hit->s, hit->n); }
    if (c->elide && name->n == 4 && memcmp(name->s, "rank", 4) == 0) {
        Buf vk = {0};
        int same = key_val(&vk, value) == 0 && vk.n == c->rank.n && memcmp(vk.p, c->rank.p, vk.n) == 0;
        buf_free(&vk);
        if (same) { e->ann_kept = 1; return map_set_h(&c->m, k->p, (size_t)k->n, kh, bytes_new("", 0)); }
    }
    if (c->elide && name->n == 4 && memcmp(name->s, "role", 4) == 0) {
        Buf vk = {0};
        int same = key_val(&vk, value) == 0 && vk.n == c->role.n && memcmp(vk.p, c->role.p, vk.n) == 0;
        buf_free(&vk);
        if (same) { e->ann_kept = 1; return map_set_h(&c->m, k->p, (size_t)k->n, kh, bytes_new("", 0)); }
    }
    Py_ssize_t start = b->n;
    int keep;
    if (value->k == V_STR) {
        Py_ssize_t chars = utf8_chars(value);
        int inline_key = (name->n == 7 && memcmp(name->s, "span_id", 7) == 0) ||
                         (name->n == 14 && memcmp(name->s, "parent_span_id", 14) == 0);
        if (inline_key) {
            if (value->ascii && chars < 128) return annotation_inline(e, b, name->s, name->n, value->s, value->n);
            if (value->ascii && intern_key(e, name->s, name->n) < 0) return -1;
            return annotation_text(e, b, name->s, name->n, value->s, value->n);
        }
        if (chars > LONG_STRING) {
            if (annotation_text(e, b, name->s, name->n, value->s, value->n) < 0) return -1;
        } else {
            int64_t kid = intern_key(e, name->s, name->n);  /* the name is interned before the value */
            if (kid < 0) return -1;
            int64_t iid = intern_val(e, &e->strings, TBL_STRINGS, value);
            if (iid < 0) return -1;
            char part[24];
            int pn = 0;
            part[pn++] = (char)0x88; part[pn++] = 0x01;  /* string_value_iid (17) */
            pn += put_varint_raw(part + pn, (uint64_t)iid);
            if (annotation(e, b, name->s, name->n, part, pn) < 0) return -1;
        }
        keep = chars <= LONG_STRING;
    } else {
        Buf part = {0};
        int rc = scalar_part(&part, value);
        if (rc == 0) rc = annotation(e, b, name->s, name->n, part.p, part.n);
        buf_free(&part);
        if (rc) return rc < 0 ? -1 : 0;
        keep = value->k != V_FLOAT;
    }
    if (keep) {
        if (c->m.n >= 16384) { map_clear(&c->m); map_clear(&c->raw); }
        Bytes *kept = bytes_new(b->p + start, b->n - start);
        if (!kept || map_set_h(&c->m, k->p, (size_t)k->n, kh, kept) < 0) return -1;
        e->ann_kept = 1;
    }
    return 0;
}
static int encode_args(Enc *e, Buf *b, const Val *pid, const Member *args, Py_ssize_t n, const Member *extra,
                       Py_ssize_t nextra) {
    Cache *c = cache_for(e, pid);
    if (!c) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (args[i].key.k == V_ABSENT) continue;
        const char *raw = args[i].raw;
        size_t rawn = (size_t)args[i].rawn;
        Bytes *hit = NULL;
        uint32_t *memo = &c->memo[args[i].slot & (RAW_MEMO - 1)];
        if (*memo && *memo <= c->raw.n) {
            const Entry *en = &c->raw.en[*memo - 1];
            if (en->kn == rawn && bytes_eq(ENTRY_KEY(en), raw, rawn)) hit = en->v;
        }
        uint64_t rh = 0;
        if (!hit) {
            rh = hash_bytes(raw, rawn);
            uint64_t *slot = map_slot(&c->raw, raw, rawn, rh);
            if (slot) {
                hit = c->raw.en[(uint32_t)*slot - 1].v;
                *memo = (uint32_t)*slot;
            }
        }
        if (hit) {
            BUF_NEED(b, hit->n);
            copy_bytes(b->p + b->n, hit->s, (size_t)hit->n);
            b->n += hit->n;
            continue;
        }
        Py_ssize_t start = b->n;
        if (annotate(e, b, c, &args[i].key, &args[i].val) < 0) return -1;
        if (e->ann_kept) {
            if (c->raw.n >= 16384) map_clear(&c->raw);
            Bytes *kept = bytes_new(b->p + start, b->n - start);
            if (!kept || map_set_h(&c->raw, raw, rawn, rh, kept) < 0) return -1;
            *memo = (uint32_t)c->raw.n;  /* the entry just added is the last */
        }
    }
    for (Py_ssize_t i = 0; i < nextra; i++)
        if (annotate(e, b, c, &extra[i].key, &extra[i].val) < 0) return -1;
    return 0;
}

/* ===== slices.SliceWindow =================================================================== */
#define MAX_STARTS 65536
static int fifo_push(Enc *e, Record *r) {  /* takes the reference */
    if (e->fn == e->fcap) {
        Py_ssize_t cap = e->fcap ? e->fcap * 2 : 1024;
        Record **p = PyMem_Malloc(cap * sizeof(Record *));
        if (!p) { rec_unref(r); PyErr_NoMemory(); return -1; }
        for (Py_ssize_t i = 0; i < e->fn; i++) p[i] = e->fifo[(e->fhead + i) % e->fcap];
        PyMem_Free(e->fifo);
        e->fifo = p; e->fcap = cap; e->fhead = 0;
    }
    e->fifo[(e->fhead + e->fn) % e->fcap] = r;
    e->fn++;
    return 0;
}
static Record *fifo_pop(Enc *e) {
    Record *r = e->fifo[e->fhead];
    e->fhead = (e->fhead + 1) % e->fcap;
    e->fn--;
    return r;
}
#define STARTS_KEY_N 18  /* key_start's key: two ints of key_val's, a tag byte and 8 bytes each */
static int key_start(Buf *k, uint64_t uuid, int64_t start) {
    k->n = 0;
    if (key_int(k, (int64_t)uuid) < 0) return -1;
    return key_int(k, start);
}
static int win_conflicts(Enc *e, Track *t, int64_t start, int64_t end) {
    if (key_start(&e->key, t->uuid, start) < 0) return -1;
    Record *first = map_get(&e->starts, &e->key);
    return first && first->written && end > first->end;
}
static int by_start_index(Enc *e, Buf *key, Record *r) {
    Py_ssize_t bound = 4 * (e->size > 1024 ? e->size : 1024);
    if ((Py_ssize_t)e->by_start.n >= bound) map_clear(&e->by_start);
    return map_set(&e->by_start, key, rec_ref(r));
}
static int reclist_add(RecList **slot, Record *r) {
    RecList *l = *slot;
    if (!l) {
        l = PyMem_Calloc(1, sizeof(RecList));
        if (!l) { PyErr_NoMemory(); return -1; }
        *slot = l;
    }
    if (l->n == l->cap) {
        Py_ssize_t cap = l->cap ? l->cap * 2 : 4;
        Record **m = PyMem_Realloc(l->r, cap * sizeof(Record *));
        if (!m) { PyErr_NoMemory(); return -1; }
        l->r = m; l->cap = cap;
    }
    l->r[l->n++] = rec_ref(r);
    return 0;
}
static void flow_set_str(Flow *f, Str *s) { str_unref(f->s); f->k = 1; f->s = str_ref(s); }
static int win_join_parent(Enc *e, Record *r, Str *parent) {
    Record *waiting = map_get_h(&e->by_span, SKEY(parent));
    if (waiting) {
        if (waiting->track != r->track) { flow_set_str(&waiting->flow_out, parent); flow_set_str(&r->flow_in, parent); }
        return 0;
    }
    void *src = tg_get_h(&e->sources, SKEY(parent));
    if (src) {
        if ((uint64_t)(uintptr_t)src - 1 != r->track->uuid) flow_set_str(&r->flow_in, parent);
        return 0;
    }
    RecList *children = tg_get_h(&e->awaiting, SKEY(parent));
    if (!children) {
        RecList *l = NULL;
        if (reclist_add(&l, r) < 0) return -1;
        return tg_set_h(&e->awaiting, SKEY(parent), l);
    }
    if (children->n < 4096 && reclist_add(&children, r) < 0) return -1;
    return 0;
}
/* known: the caller looked (track uuid, start) up already, under the key sk (its hash sh), found
 * first, and nothing changed since: the key is neither rebuilt nor hashed again */
static int win_add_slice(Enc *e, Record *r, int known, Record *first, const char *sk, size_t skn, uint64_t sh) {
    Buf *k = &e->key;
    if (!known) {
        if (key_start(k, r->track->uuid, r->start) < 0) return -1;
        sk = k->p; skn = (size_t)k->n; sh = hash_bytes(sk, skn);
        first = map_get_h(&e->starts, sk, skn, sh);
    }
    if (!first) {
        if (e->starts.n >= MAX_STARTS) map_clear(&e->starts);
        if (map_set_h(&e->starts, sk, skn, sh, rec_ref(r)) < 0) return -1;
    } else if (r->end > first->end && !first->written) {
        if (first->nbefore == first->before_cap) {
            Py_ssize_t cap = first->before_cap ? first->before_cap * 2 : 2;
            Record **p = PyMem_Realloc(first->before, cap * sizeof(Record *));
            if (!p) { PyErr_NoMemory(); return -1; }
            first->before = p; first->before_cap = cap;
        }
        first->before[first->nbefore++] = rec_ref(r);
        r->attached = 1;
    }
    if (fifo_push(e, rec_ref(r)) < 0) return -1;
    if (r->parent && win_join_parent(e, r, r->parent) < 0) return -1;
    if (r->span) {
        RecList *children = tg_pop_h(&e->awaiting, SKEY(r->span));
        if (children) {
            for (Py_ssize_t i = 0; i < children->n; i++) {
                Record *child = children->r[i];
                if (!child->written && !child->flow_in.k && child->track != r->track) {
                    flow_set_str(&child->flow_in, r->span);
                    flow_set_str(&r->flow_out, r->span);
                }
            }
            reclist_free_v(children);
        }
        if (map_set_h(&e->by_span, SKEY(r->span), rec_ref(r)) < 0) return -1;
    }
    if (e->has_by_start) {
        /* As slices.add_slice indexes it: under (track uuid, start) + (start,). */
        if (key_start(k, r->track->uuid, r->start) < 0 || key_int(k, r->start) < 0) return -1;
        if (by_start_index(e, k, r) < 0) return -1;
    }
    return 0;
}
static int win_mark_source(Enc *e, const Val *span) {
    Buf *k = &e->key; k->n = 0;
    if (key_val(k, span) < 0) return -1;
    Record *r = map_get(&e->by_span, k);
    if (r) {
        Str *s = str_new(span->s, span->n);
        if (!s) return -1;
        flow_set_str(&r->flow_out, s);
        str_unref(s);
    }
    return 0;
}
/* SliceWindow.bind; 1 taken, 0 not, -1 error. */
static int win_bind(Enc *e, const Val *pid, const Val *tid, int64_t start, int out, uint64_t flow) {
    Buf *k = &e->key;
    if (!e->has_by_start) {
        e->has_by_start = 1;
        for (Py_ssize_t i = 0; i < e->fn; i++) {
            Record *r = e->fifo[(e->fhead + i) % e->fcap];
            if (r->kind == R_SLICE && r->track->has_pid) {
                k->n = 0;
                if (key_int(k, r->track->pid) < 0) return -1;
                if (r->track->kind == TK_THREAD) { if (key_int(k, r->track->tid) < 0) return -1; }
                else if (key_val(k, &(Val){V_NULL}) < 0) return -1;
                if (key_int(k, r->start) < 0 || map_set(&e->by_start, k, rec_ref(r)) < 0) return -1;
            }
        }
    }
    k->n = 0;
    if (key_val(k, pid) < 0 || key_val(k, tid) < 0 || key_int(k, start) < 0) return -1;
    Record *r = map_get(&e->by_start, k);
    if (!r || r->written) return 0;
    Flow *f = out ? &r->flow_out : &r->flow_in;
    if (f->k) return 0;
    f->k = 2; f->id = flow;
    return 1;
}
/* SliceWindow._taken */
static int win_taken(Enc *e, Record *r) {
    r->written = 1;
    if (r->parent && r->parent_part_n) {
        /* parent_part_n 0: not written (its bytes are freed with the body's, once written) */
        if (r->flow_in.k == 1 && str_eq(r->flow_in.s, r->parent)) {
            r->parent_part_n = 0;
        } else {
            Record *above = map_get_h(&e->by_span, SKEY(r->parent));
            Placed here, *placed = NULL;
            if (above) { here.uuid = above->track->uuid; here.start = above->start; here.end = above->end; placed = &here; }
            else placed = tg_get_h(&e->written, SKEY(r->parent));
            if (placed && placed->uuid == r->track->uuid && placed->start <= r->start && r->end <= placed->end)
                r->parent_part_n = 0;
        }
    }
    if (r->span) {
        uint64_t *slot = map_slot(&e->by_span, SKEY(r->span));
        if (slot && e->by_span.en[(uint32_t)*slot - 1].v == r) rec_unref(map_pop_at(&e->by_span, slot));
        if (r->flow_out.k && tg_set_h(&e->sources, SKEY(r->span), (void *)(uintptr_t)(r->track->uuid + 1)) < 0) return -1;
        Placed *p = PyMem_Malloc(sizeof(Placed));
        if (!p) { PyErr_NoMemory(); return -1; }
        p->uuid = r->track->uuid; p->start = r->start; p->end = r->end;
        if (tg_set_h(&e->written, SKEY(r->span), p) < 0) return -1;
    }
    return 0;
}
/* ===== encoder.PerfettoEncoder: the handlers =============================================== */
#define SAFE_NS (1LL << 62)
static int unsupported(const char *why) { PyErr_SetString(Unsupported, why); return -1; }
static int is_complex(const Val *v) { return v->k == V_ARR || v->k == V_OBJ; }
static int is_label(const Val *v) { return v->k == V_STR || v->k == V_INT || v->k == V_FLOAT; }

/* encoder._ns: 1 with *out, 0 for no number, -1 (Unsupported) beyond what int64 keeps exactly. */
static int ns_of(const Val *v, int64_t *out) {
    if (v->k == V_FLOAT) {
        double d = v->d;
        if (!isfinite(d)) return 0;
        if (fabs(d) >= 4.0e15) return unsupported("a timestamp beyond 64-bit nanoseconds");
        double whole = trunc(d);
        *out = (int64_t)whole * 1000 + (int64_t)nearbyint((d - whole) * 1000);
        return 1;
    }
    if (v->k == V_INT) {
        if (v->i >= SAFE_NS / 1000 || v->i <= -SAFE_NS / 1000) return unsupported("a timestamp beyond 64-bit nanoseconds");
        *out = v->i * 1000;
        return 1;
    }
    return 0;
}
static int when(Enc *e, const Val *ts, int64_t *out) {  /* encoder._when */
    int r = ns_of(ts, out);
    if (r == 1 && !e->has_first) { e->has_first = 1; e->first_ns = *out; }
    return r;
}
/* Inline, so that the name's length is a constant and its comparison mostly one of the first byte. */
static ALWAYS_INLINE Val *arg(Event *ev, const char *name) {
    size_t n = strlen(name);
    for (Py_ssize_t i = 0; i < ev->nargs; i++) {
        Val *k = &ev->args[i].key;
        if ((size_t)k->n == n && k->k == V_STR && k->s[0] == name[0] && memcmp(k->s, name, n) == 0)
            return &ev->args[i].val;
    }
    return NULL;
}
static const Val absent = {V_ABSENT};
#define OR_NONE(p) ((p) ? (p) : &absent)

static const Val *lane_tid(Enc *e, const Val *pid, const Val *tid) {
    if (!e->lanes.n) return tid;
    Buf *k = &e->key; k->n = 0;
    if (key_val(k, pid) < 0 || key_val(k, tid) < 0) return NULL;
    Kept *first = map_get(&e->lanes, k);
    return first ? &first->v : tid;
}
static int own_key(Buf *k, const Val *pid, const Val *tid, const char *kind, const Val *id) {
    k->n = 0;
    if (buf_byte(k, 4) < 0 || key_val(k, pid) < 0 || key_val(k, tid) < 0 || key_text(k, kind, strlen(kind)) < 0) return -1;
    return key_val(k, id);
}
static int64_t floordiv(int64_t a, int64_t b) { int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q--; return q; }
/* encoder._new_own */
static Track *new_own(Enc *e, const Val *pid, const Val *tid, const char *kind, int tk, const Val *id,
                      int64_t start, const char *label, const Val *task) {
    Buf name = {0};
    Track *t = NULL;
    if (task && is_label(task)) {
        if (buf_put(&name, "task ", 5) < 0 || pystr(&name, task) < 0 || buf_put(&name, " \xc2\xb7 ", 4) < 0) goto done;
    }
    if (buf_put(&name, label, strlen(label)) < 0) goto done;
    if (id->k != V_NULL && id->k != V_ABSENT && pystr(&name, id) < 0) goto done;
    int64_t base = e->has_first && e->first_ns ? e->first_ns : start;
    Buf full = {0};
    if (own_key(&full, pid, tid, kind, id) < 0) { buf_free(&full); goto done; }
    t = reg_timed(e, &full, pid, name.p, name.n, floordiv(start - base, 1000000), tk);
    if (t) {
        if (e->own.n >= 8192) { e->own_memo.t = NULL; map_clear(&e->own); }  /* its track may go */
        if (map_set(&e->own, &full, track_ref(t)) < 0) t = NULL;
    }
    buf_free(&full);
done:
    buf_free(&name);
    return t;
}
/* One session's slices come in a run: the last answer is kept for a key of plain ints (pid, tid, and
 * an int or no id; tk stands for kind, one kind a tk). Ints of the same kind and value make the same
 * key, so a match is the map's own answer; own holds the track until it is cleared, which drops the
 * memo (new_own), and its entries are never replaced. */
static Track *own_track(Enc *e, const Val *pid, const Val *tid, const char *kind, int tk, const Val *id,
                        int64_t start, const char *label, const Val *task) {
    int id_null = id->k == V_NULL || id->k == V_ABSENT;
    int plain = pid->k == V_INT && tid->k == V_INT && (id_null || id->k == V_INT);
    if (plain && e->own_memo.t && e->own_memo.tk == tk && e->own_memo.pid == pid->i && e->own_memo.tid == tid->i &&
        e->own_memo.id_null == id_null && (id_null || e->own_memo.id == id->i))
        return e->own_memo.t;
    if (own_key(&e->key, pid, tid, kind, id) < 0) return NULL;
    Track *t = map_get(&e->own, &e->key);
    if (!t) t = new_own(e, pid, tid, kind, tk, id, start, label, task);
    if (t && plain) {
        e->own_memo.t = t; e->own_memo.tk = tk; e->own_memo.pid = pid->i; e->own_memo.tid = tid->i;
        e->own_memo.id_null = id_null; e->own_memo.id = id_null ? 0 : id->i;
    }
    return t;
}
/* encoder._track_for */
/* session, kind, task: the args rl.session.id, rl.span.kind, rl.task.id as arg() finds them (NULL: none) */
static Track *track_for(Enc *e, const Val *pid, const Val *tid, const Val *session, const Val *kind,
                        const Val *task, int64_t start) {
    session = OR_NONE(session); kind = OR_NONE(kind); task = OR_NONE(task);
    if (session->k != V_ABSENT && session->k != V_NULL) {
        if (is_label(session) && !is_str(kind, "annotation"))
            return own_track(e, pid, tid, "session", TK_SESSION, session, start, "session ", task);
    } else if (is_str(kind, "task")) {
        if (is_label(task)) return own_track(e, pid, tid, "task", TK_TASK, task, start, "task ", NULL);
    } else if (is_str(kind, "step")) {
        return own_track(e, pid, tid, "steps", TK_STEPS, &(Val){V_NULL}, start, "steps", NULL);
    }
    return reg_thread(e, pid, tid);
}
static int64_t slack_of(const Val *ts) {  /* encoder._slack */
    if (ts->k != V_FLOAT) return 0;
    double a = fabs(ts->d);
    double ulp = nextafter(a, INFINITY) - a;
    return (int64_t)(ulp * 2000);
}
/* A string value's Str: its ascii flag is the parser's, which is exact (set for a text whose
 * bytes, escapes decoded, are all ASCII), so the bytes are not scanned again. */
static Str *str_of(const Val *v) { return str_new_a(v->s, v->n, v->ascii != 0); }

/* encoder._slice: 1 written, 0 left out, -1 error. */
static int h_slice(Enc *e, Event *ev) {
    Val *f = ev->f;
    int64_t start, end;
    const Val *ts = &absent;
    int r;
    if (f[K_START_NS].k == V_ABSENT || f[K_START_NS].k == V_NULL) {
        ts = &f[K_TS];
        if (ts->k == V_ABSENT) return 0;
        if ((r = ns_of(ts, &start)) <= 0) return r;
        int64_t dur = 0;
        r = f[K_DUR].k == V_ABSENT ? 1 : ns_of(&f[K_DUR], &dur);
        if (r < 0) return -1;
        end = r == 1 && dur > 0 ? start + dur : start;
        if (end >= SAFE_NS) return unsupported("a slice end beyond 64-bit nanoseconds");
    } else {
        if (f[K_START_NS].k != V_INT) return 0;
        start = f[K_START_NS].i;
        end = f[K_END_NS].k == V_INT && f[K_END_NS].i >= start ? f[K_END_NS].i : start;
        if (start >= SAFE_NS || start <= -SAFE_NS || end >= SAFE_NS) return unsupported("exact nanoseconds beyond the range mirrored");
    }
    if (!e->has_first) { e->has_first = 1; e->first_ns = start; }
    const Val *pid = &f[K_PID], *source_tid = &f[K_TID];
    if (pid->k == V_ABSENT || source_tid->k == V_ABSENT || is_complex(pid) || is_complex(source_tid)) return 0;
    /* (pid, tid) as written: its key and hash serve the lanes lookup here and the last map below */
    Buf *tk = &e->tidkey; tk->n = 0;
    if (key_val(tk, pid) < 0 || key_val(tk, source_tid) < 0) return -1;
    uint64_t th = hash_bytes(tk->p, (size_t)tk->n);
    const Val *tid = source_tid;  /* lane_tid */
    if (e->lanes.n) {
        Kept *lane_first = map_get_h(&e->lanes, tk->p, (size_t)tk->n, th);
        if (lane_first) tid = &lane_first->v;
    }
    Kept *tid_kept = NULL;
    if (tid != source_tid) { tid_kept = kept_new(tid); if (!tid_kept) return -1; tid = &tid_kept->v; }
    int rc = -1;
    Track *track;
    Str *span = NULL, *parent = NULL;
    /* ids: scratch, emptied here, copied into body. body: scratch too (the record gets a copy, in
     * its own allocation, so no buffer is grown from nothing per slice), parent_part after it. */
    Buf *ids = &e->ids, *bodyp = &e->body;
    ids->n = 0; bodyp->n = 0;
    Py_ssize_t body_n = 0;
    Member extra[2];
    Py_ssize_t nextra = 0;
    int has_args = f[K_ARGS].k == V_OBJ && ev->nargs > 0;
    if (has_args) {
        /* One pass over the args: the three track_for reads (the first string key of each name, as
         * arg() finds it) and the span ids (the last of each, every one taken out of the args). */
        Val *sv = NULL, *pv = NULL, *session = NULL, *kind = NULL, *task = NULL;
        /* The last index of each id name: the trace file's ("id", "parent") and older files'. */
        Py_ssize_t span_at[2] = {-1, -1}, parent_at[2] = {-1, -1};
        for (Py_ssize_t i = 0; i < ev->nargs; i++) {
            Val *k = &ev->args[i].key;
            switch (k->n) {
            case 2: if (memcmp(k->s, "id", 2) == 0) span_at[0] = i; break;
            case 7: if (memcmp(k->s, "span_id", 7) == 0) span_at[1] = i; break;
            case 6: if (memcmp(k->s, "parent", 6) == 0) parent_at[0] = i; break;
            case 14: if (memcmp(k->s, "parent_span_id", 14) == 0) parent_at[1] = i; break;
            case 13: if (!session && k->k == V_STR && memcmp(k->s, "rl.session.id", 13) == 0) session = &ev->args[i].val; break;
            case 12: if (!kind && k->k == V_STR && memcmp(k->s, "rl.span.kind", 12) == 0) kind = &ev->args[i].val; break;
            case 10: if (!task && k->k == V_STR && memcmp(k->s, "rl.task.id", 10) == 0) task = &ev->args[i].val; break;
            }
        }
        /* The id under the trace file's name where it has one, else the older name; every arg of
         * the name taken is taken out of the args (a repeated key: the last wins, as in a dict). */
        const char *span_name = "span_id", *parent_name = "parent_span_id";
        Py_ssize_t span_name_n = 7, parent_name_n = 14;
        Py_ssize_t si = span_at[0] >= 0 ? span_at[0] : span_at[1], pi = parent_at[0] >= 0 ? parent_at[0] : parent_at[1];
        if (si >= 0) {
            Val *key = &ev->args[si].key;
            span_name = key->s; span_name_n = key->n;
            sv = &ev->args[si].val;
        }
        if (pi >= 0) {
            Val *key = &ev->args[pi].key;
            parent_name = key->s; parent_name_n = key->n;
            pv = &ev->args[pi].val;
        }
        for (Py_ssize_t i = 0; i < ev->nargs && (sv || pv); i++) {
            Val *k = &ev->args[i].key;
            if ((sv && k->n == span_name_n && memcmp(k->s, span_name, (size_t)span_name_n) == 0)
                || (pv && k->n == parent_name_n && memcmp(k->s, parent_name, (size_t)parent_name_n) == 0))
                k->k = V_ABSENT;
        }
        track = track_for(e, pid, tid, session, kind, task, start);
        if (!track) goto done;
        if (sv && sv->k == V_STR) {
            if (!(span = str_of(sv)) || span_annotation(e, ids, "span_id", 7, span) < 0) goto done;
            if (pv && pv->k == V_STR) {  /* one Str: the parents map's and the record's */
                if (!(parent = str_of(pv))) goto done;
                if (tg_set_h(&e->parents, SKEY(span), str_ref(parent)) < 0) goto done;
                e->hot_span = span; e->hot_parent = parent;  /* parents[span] is parent now */
            }
        } else if (sv && sv->k != V_NULL) {
            extra[nextra].key = (Val){V_STR, 1, 0, 0, span_name, span_name_n}; extra[nextra++].val = *sv;
        }
        if (pv && pv->k == V_STR) {
            if (!parent && !(parent = str_of(pv))) goto done;
        } else if (pv && pv->k != V_NULL) {
            extra[nextra].key = (Val){V_STR, 1, 0, 0, parent_name, parent_name_n}; extra[nextra++].val = *pv;
        }
    } else {
        track = reg_thread(e, pid, tid);
        if (!track) goto done;
    }
    int64_t ps = start, pe = end;
    /* win_tied, and win_conflicts on this track below: one lookup (taking changes no starts) */
    if (key_start(&e->key, track->uuid, start) < 0) goto done;
    char skey[STARTS_KEY_N];  /* kept for win_add_slice: e->key is scratch that the calls between reuse */
    memcpy(skey, e->key.p, STARTS_KEY_N);
    uint64_t sh = hash_bytes(skey, STARTS_KEY_N);
    Record *first = map_get_h(&e->starts, skey, STARTS_KEY_N, sh);
    Track *first_track = track;  /* whose (uuid, start) first was looked up under */
    int tied = first != NULL;
    r = tied ? 0 : track_take(e, track, start, end, 0, span, &ps, &pe, 0);
    if (r < 0) goto done;
    if (!r) {
        int64_t slack = slack_of(ts);
        for (int again = 0;; again = 1) {
            int c = again ? win_conflicts(e, track, start, end) : first && first->written && end > first->end;
            if (c < 0) goto done;
            if (!c) {
                r = track_take(e, track, start, end, slack, span, &ps, &pe, !again && !tied);
                if (r < 0) goto done;
                if (r) break;
            }
            if (!(track = reg_overflow(e, track))) goto done;
        }
    }
    if (is_complex(&f[K_NAME])) { rc = 0; goto done; }
    if (name_field(e, bodyp, &f[K_NAME]) < 0) goto done;
    if (f[K_CAT].k != V_ABSENT && f[K_CAT].k != V_NULL) {
        if (is_complex(&f[K_CAT])) { rc = 0; goto done; }
        if (category_field(e, bodyp, &f[K_CAT]) < 0) goto done;
    }
    if (has_args) {
        if (encode_args(e, bodyp, pid, ev->args, ev->nargs, extra, nextra) < 0) goto done;
        if (buf_put(bodyp, ids->p, ids->n) < 0) goto done;
    }
    body_n = bodyp->n;
    if (parent && span_annotation(e, bodyp, "parent_span_id", 14, parent) < 0) goto done;
    Record *rec = PyMem_Malloc(sizeof(Record) + (size_t)bodyp->n);
    if (!rec) { PyErr_NoMemory(); goto done; }
    memset(rec, 0, sizeof(Record));
    rec->rc = 1; rec->kind = R_SLICE; rec->start = ps; rec->end = pe; rec->track = track_ref(track);
    rec->inline_bytes = 1;
    rec->body = (char *)(rec + 1); rec->body_n = body_n;
    rec->parent_part = rec->body + body_n; rec->parent_part_n = bodyp->n - body_n;
    if (bodyp->n) memcpy(rec->body, bodyp->p, (size_t)bodyp->n);
    rec->span = span; rec->parent = parent; span = parent = NULL;
    if (win_add_slice(e, rec, rec->track == first_track && ps == start, first, skey, STARTS_KEY_N, sh) < 0) {
        rec_unref(rec); goto done;
    }
    /* last[(pid, tid)] = rec, through a hint of the entry (its number + 1) by the key's hash: the
     * slices of a thread mostly come in runs, so the entry is mostly the one stored before */
    uint32_t *lh = &e->last_hint[th & (LAST_HINTS - 1)];
    Entry *held = *lh && *lh <= e->last.n ? &e->last.en[*lh - 1] : NULL;
    if (held && held->h == th && held->kn == (size_t)tk->n && bytes_eq(ENTRY_KEY(held), tk->p, (size_t)tk->n)) {
        if (held->v && held->v != rec) rec_unref(held->v);  /* as map_set_h frees the old value */
        held->v = rec;
    } else {
        size_t before = e->last.n;
        if (map_set_h(&e->last, tk->p, (size_t)tk->n, th, rec) < 0) goto done;
        if (e->last.n > before) {
            *lh = (uint32_t)e->last.n;  /* a new entry: the last */
        } else {
            uint64_t *slot = map_slot(&e->last, tk->p, (size_t)tk->n, th);
            *lh = slot ? (uint32_t)*slot : 0;
        }
    }
    if (e->last.n > 16384) map_clear(&e->last);
    rc = 1;
done:
    e->hot_span = e->hot_parent = NULL;
    PyMem_Free(tid_kept);
    str_unref(span); str_unref(parent);
    return rc;
}
static int no_complex_ids(const Val *pid, const Val *tid) {
    if (is_complex(pid) || is_complex(tid)) return unsupported("a list or dict as a pid or tid");
    return 0;
}
/* encoder._event_body */
static int event_body(Enc *e, Event *ev, Buf *b) {
    Val *f = ev->f;
    if (is_complex(&f[K_NAME]) || is_complex(&f[K_CAT])) return unsupported("a list or dict as a name or category");
    if (name_field(e, b, &f[K_NAME]) < 0) return -1;
    if (f[K_CAT].k != V_ABSENT && f[K_CAT].k != V_NULL && category_field(e, b, &f[K_CAT]) < 0) return -1;
    if (f[K_ARGS].k == V_OBJ && ev->nargs && encode_args(e, b, &f[K_PID], ev->args, ev->nargs, NULL, 0) < 0) return -1;
    return 0;
}
static int add_record(Enc *e, int kind, int64_t ns, Track *t, Buf *body) {
    Record *rec = PyMem_Calloc(1, sizeof(Record));
    if (!rec) { PyErr_NoMemory(); return -1; }
    rec->rc = 1; rec->kind = kind; rec->start = rec->end = ns; rec->track = track_ref(t);
    if (body) { rec->body = body->p; rec->body_n = body->n; body->p = NULL; body->n = body->cap = 0; }
    return fifo_push(e, rec);
}
/* encoder._instant */
static int h_instant(Enc *e, Event *ev) {
    Val *f = ev->f;
    int64_t ns;
    int r = when(e, &f[K_TS], &ns);
    if (r <= 0) return r;
    const Val *pid = &f[K_PID], *tid = &f[K_TID];
    if (no_complex_ids(pid, tid) < 0) return -1;
    Track *t;
    if (is_str(&f[K_S], "g")) t = reg_global(e);
    else if (is_str(&f[K_S], "p")) t = reg_process(e, pid);
    else {
        e->key.n = 0;
        if (key_val(&e->key, pid) < 0 || key_val(&e->key, tid) < 0) return -1;
        Record *last = map_get(&e->last, &e->key);
        if (last && last->start <= ns && ns <= last->end) t = last->track;
        else {
            const Val *lt = lane_tid(e, pid, tid);
            t = lt ? reg_thread(e, pid, lt) : NULL;
        }
    }
    if (!t) return -1;
    track_ref(t);
    Buf body = {0};
    int rc = event_body(e, ev, &body) < 0 ? -1 : add_record(e, R_INSTANT, ns, t, &body);
    buf_free(&body);
    track_unref(t);
    return rc < 0 ? -1 : 1;
}
/* encoder._begin_end */
static int h_begin_end(Enc *e, Event *ev, int begin) {
    Val *f = ev->f;
    int64_t ns;
    int r = when(e, &f[K_TS], &ns);
    if (r <= 0) return r;
    if (no_complex_ids(&f[K_PID], &f[K_TID]) < 0) return -1;
    const Val *lt = lane_tid(e, &f[K_PID], &f[K_TID]);
    Track *t = lt ? reg_thread(e, &f[K_PID], lt) : NULL;
    if (!t) return -1;
    Buf body = {0};
    int rc = begin ? (event_body(e, ev, &body) < 0 ? -1 : add_record(e, R_BEGIN, ns, t, &body))
                   : add_record(e, R_END, ns, t, NULL);
    buf_free(&body);
    return rc < 0 ? -1 : 1;
}
/* encoder._nestable_async */
static int h_async(Enc *e, Event *ev, char phase) {
    Val *f = ev->f;
    int64_t ns;
    int r = when(e, &f[K_TS], &ns);
    if (r <= 0) return r;
    const Val *pid = &f[K_PID];
    if (no_complex_ids(pid, &absent) < 0) return -1;
    if (is_complex(&f[K_CAT])) return unsupported("a list or dict as a category");
    Buf idtext = {0}, k = {0}, name = {0};
    int rc = -1;
    if (pystr(&idtext, f[K_ID].k != V_ABSENT ? &f[K_ID] : &f[K_ID2]) < 0) goto done;
    if (key_val(&k, pid) < 0 || key_val(&k, &f[K_CAT]) < 0 || key_text(&k, idtext.p ? idtext.p : "", idtext.n) < 0) goto done;
    Track *t = map_get(&e->async_, &k);
    if (!t) {
        Buf full = {0};
        if (buf_byte(&full, 4) < 0 || key_val(&full, pid) < 0 || key_text(&full, "async", 5) < 0 ||
            key_val(&full, &f[K_CAT]) < 0 || key_text(&full, idtext.p ? idtext.p : "", idtext.n) < 0 ||
            pystr(&name, &f[K_NAME]) < 0) { buf_free(&full); goto done; }
        if (e->async_.n >= 10000) map_clear(&e->async_);
        t = reg_timed(e, &full, pid, name.p ? name.p : "", name.n, 0, TK_ASYNC);
        buf_free(&full);
        if (!t || map_set(&e->async_, &k, track_ref(t)) < 0) goto done;
    }
    int kind = phase == 'b' ? R_BEGIN : phase == 'e' ? R_END : R_INSTANT;
    Buf body = {0};
    if (kind != R_END && event_body(e, ev, &body) < 0) { buf_free(&body); goto done; }
    rc = add_record(e, kind, ns, t, kind == R_END ? NULL : &body) < 0 ? -1 : 1;
    buf_free(&body);
done:
    buf_free(&idtext); buf_free(&k); buf_free(&name);
    return rc;
}
/* encoder._counter */
static Counter *counter_of(Enc *e, Track *t) {
    if (t->in_counters) return &e->counters[t->in_counters - 1];
    if (e->ncounters == e->counters_cap) {
        Py_ssize_t cap = e->counters_cap ? e->counters_cap * 2 : 16;
        Counter *c = PyMem_Realloc(e->counters, cap * sizeof(Counter));
        if (!c) { PyErr_NoMemory(); return NULL; }
        e->counters = c; e->counters_cap = cap;
    }
    Counter *c = &e->counters[e->ncounters++];
    memset(c, 0, sizeof *c);
    c->track = track_ref(t);
    t->in_counters = (int)e->ncounters;
    return c;
}
static int sample_less(const Sample *a, const Sample *b) { return a->ns < b->ns || (a->ns == b->ns && a->order < b->order); }
static int heap_push(Counter *c, const Sample *s) {
    if (c->n == c->cap) {
        Py_ssize_t cap = c->cap ? c->cap * 2 : 16;
        Sample *h = PyMem_Realloc(c->h, cap * sizeof(Sample));
        if (!h) { PyErr_NoMemory(); return -1; }
        c->h = h; c->cap = cap;
    }
    Py_ssize_t i = c->n++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (!sample_less(s, &c->h[up])) break;
        c->h[i] = c->h[up]; i = up;
    }
    c->h[i] = *s;
    return 0;
}
static Sample heap_pop(Counter *c) {
    Sample top = c->h[0], last = c->h[--c->n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, m = i;
        const Sample *best = &last;
        if (l < c->n && sample_less(&c->h[l], best)) { m = l; best = &c->h[l]; }
        if (r < c->n && sample_less(&c->h[r], best)) { m = r; }
        if (m == i) break;
        c->h[i] = c->h[m]; i = m;
    }
    if (c->n) c->h[i] = last;
    return top;
}
static int h_counter(Enc *e, Event *ev) {
    Val *f = ev->f;
    if (f[K_ARGS].k != V_OBJ) return 0;
    int64_t ns;
    int r = when(e, &f[K_TS], &ns);
    if (r <= 0) return r;
    const Val *pid = &f[K_PID];
    if (no_complex_ids(pid, &absent) < 0) return -1;
    Buf name = {0}, full = {0};
    int wrote = 0, rc = -1;
    if (pystr(&name, &f[K_NAME]) < 0) goto done;
    for (Py_ssize_t i = 0; i < ev->nargs; i++) {
        const Val *key = &ev->args[i].key, *value = &ev->args[i].val;
        Sample s;
        if (value->k == V_INT) {
            unsigned char *p = (unsigned char *)s.value;
            p[0] = 0xF0; p[1] = 0x01;
            s.vn = 2 + put_varint_raw(s.value + 2, (uint64_t)value->i);
        } else if (value->k == V_FLOAT) {
            unsigned char *p = (unsigned char *)s.value;
            p[0] = 0xE1; p[1] = 0x02;
            memcpy(s.value + 2, &value->d, 8);
            s.vn = 10;
        } else continue;
        full.n = 0;
        if (buf_put(&full, name.p, name.n) < 0) goto done;
        if (!(key->n == 5 && memcmp(key->s, "value", 5) == 0)) {
            if (buf_byte(&full, ' ') < 0 || buf_put(&full, key->s, key->n) < 0) goto done;
        }
        Track *t = reg_counter(e, pid, full.p ? full.p : "", full.n);
        if (!t) goto done;
        Counter *c = counter_of(e, t);
        if (!c) goto done;
        s.ns = ns; s.order = e->counter_order++;
        if (heap_push(c, &s) < 0) goto done;
        wrote = 1;
    }
    rc = wrote;
done:
    buf_free(&name); buf_free(&full);
    return rc;
}
/* encoder._metadata */
static int rank_and_role(Enc *e, const Val *name, Elided **out) {  /* *out NULL: no rank in the name */
    *out = NULL;
    if (name->k != V_STR) return 0;
    PyObject *f = helper("rank_and_role");
    if (!f) return -1;
    PyObject *res = PyObject_CallFunction(f, "y#", name->s, name->n);
    Py_DECREF(f);
    if (!res) return -1;
    if (res == Py_None) { Py_DECREF(res); return 0; }
    int overflow = 0;
    long long rank = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(res, 0), &overflow);
    PyObject *role = PyTuple_GET_ITEM(res, 1);
    if (overflow) { Py_DECREF(res); return unsupported("a rank beyond 64 bits"); }
    Elided *el = PyMem_Calloc(1, sizeof(Elided));
    if (!el) { Py_DECREF(res); PyErr_NoMemory(); return -1; }
    int rc = key_int(&el->rank, rank);
    if (rc == 0) {
        if (role == Py_None) rc = key_val(&el->role, &(Val){V_NULL});
        else rc = key_text(&el->role, PyBytes_AS_STRING(role), PyBytes_GET_SIZE(role));
    }
    Py_DECREF(res);
    if (rc < 0) { elided_free_v(el); return -1; }
    *out = el;
    return 0;
}
static int is_process_metadata(const Val *name) {
    return is_str(name, "process_name") || is_str(name, "process_labels") || is_str(name, "process_sort_index");
}
static int h_lane(Enc *e, const Val *pid, const Val *tid, const Val *sort) {
    if (sort->k != V_INT || sort->i < 0) return reg_name_thread(e, pid, tid, NULL, sort);
    int64_t thread = sort->i / 1000, lane = sort->i % 1000;
    Buf k = {0};
    int rc = -1;
    if (key_val(&k, pid) < 0 || key_int(&k, thread) < 0) goto done;
    if (lane == 0) {
        Kept *kept = kept_new(tid);
        if (!kept || map_set(&e->first_lanes, &k, kept) < 0) goto done;
        rc = reg_name_thread(e, pid, tid, NULL, sort);
        goto done;
    }
    Kept *first = map_get(&e->first_lanes, &k);
    if (first && first->v.k != V_NULL && first->v.k != V_ABSENT) {
        if (e->lanes.n >= 100000) map_clear(&e->lanes);
        k.n = 0;
        Kept *kept = kept_new(&first->v);
        if (!kept || key_val(&k, pid) < 0 || key_val(&k, tid) < 0 || map_set(&e->lanes, &k, kept) < 0) goto done;
    }
    rc = 0;
done:
    buf_free(&k);
    return rc;
}
static int h_metadata(Enc *e, Event *ev) {
    Val *f = ev->f;
    if (f[K_ARGS].k != V_OBJ) return 0;
    const Val *name = &f[K_NAME], *pid = &f[K_PID], *tid = &f[K_TID];
    if (is_complex(name)) return 0;
    const Val *aname = OR_NONE(arg(ev, "name"));
    if (is_process_metadata(name)) {
        if (is_complex(pid)) return unsupported("a list or dict as a pid");
        e->key.n = 0;
        if (key_val(&e->key, pid) < 0) return -1;
        if (map_has(&e->elided, &e->key)) {
            Elided *el;
            if (rank_and_role(e, aname, &el) < 0) return -1;
            if (!el) return 1;
            elided_free_v(el);
        }
    }
    if (is_str(name, "process_name")) {
        if (reg_name_process(e, pid, aname, NULL, NULL) < 0) return -1;
        Elided *el;
        if (rank_and_role(e, aname, &el) < 0) return -1;
        if (el) {
            Buf k = {0};
            if (key_val(&k, pid) < 0 || map_set(&e->elided, &k, el) < 0) { buf_free(&k); return -1; }
            Cache *c = map_pop(&e->caches, &k);
            if (c) cache_free_v(c);
            buf_free(&k);
        }
    } else if (is_str(name, "process_labels")) {
        if (reg_name_process(e, pid, NULL, OR_NONE(arg(ev, "labels")), NULL) < 0) return -1;
    } else if (is_str(name, "process_sort_index")) {
        if (reg_name_process(e, pid, NULL, NULL, OR_NONE(arg(ev, "sort_index"))) < 0) return -1;
    } else if (is_str(name, "thread_name")) {
        if (no_complex_ids(pid, tid) < 0 || reg_name_thread(e, pid, tid, aname, NULL) < 0) return -1;
    } else if (is_str(name, "thread_sort_index")) {
        if (no_complex_ids(pid, tid) < 0 || h_lane(e, pid, tid, OR_NONE(arg(ev, "sort_index"))) < 0) return -1;
    } else if (is_str(name, "otel_rl.flow_source")) {
        const Val *span = arg(ev, "id");
        span = OR_NONE(span ? span : arg(ev, "span_id"));
        if (span->k == V_STR && win_mark_source(e, span) < 0) return -1;
    }
    return 1;
}
/* encoder._flow */
static int h_flow(Enc *e, Event *ev, char phase) {
    Val *f = ev->f;
    int64_t ns;
    int r = ns_of(&f[K_TS], &ns);
    if (r <= 0) return r;
    const Val *pid = &f[K_PID], *tid = &f[K_TID];
    if (is_str(&f[K_CAT], "rl.flow")) {
        const Val *parent = f[K_ARGS].k == V_OBJ ? arg(ev, "parent") : NULL;
        if (!parent && f[K_ARGS].k == V_OBJ) parent = arg(ev, "parent_span_id");
        parent = OR_NONE(parent);
        if (phase == 'f' && parent->k == V_STR) {
            if (no_complex_ids(pid, tid) < 0) return -1;
            e->key.n = 0;
            if (key_val(&e->key, pid) < 0 || key_val(&e->key, tid) < 0) return -1;
            Record *child = map_get(&e->last, &e->key);
            if (child && child->start == ns && !child->flow_in.k && !child->written) {
                Str *s = str_of(parent);
                if (!s) return -1;
                flow_set_str(&child->flow_in, s);
                str_unref(s);
            }
        }
        return 1;
    }
    if (phase == 't') return 0;
    if (no_complex_ids(pid, tid) < 0) return -1;
    Buf ident = {0};
    uint64_t id = 0;
    int rc = -1;
    if (pystr(&ident, &f[K_CAT]) < 0 || buf_byte(&ident, 0x1F) < 0 || pystr(&ident, &f[K_NAME]) < 0 ||
        buf_byte(&ident, 0x1F) < 0 || pystr(&ident, f[K_ID].k != V_ABSENT ? &f[K_ID] : &f[K_BIND_ID]) < 0) goto done;
    if (flow_id_text(ident.p, ident.n, &id) < 0) goto done;
    rc = win_bind(e, pid, tid, ns, phase == 's', id);
done:
    buf_free(&ident);
    return rc;
}

/* ===== encoder.PerfettoEncoder: writing ===================================================== */
/* What every write begins with, once something is to be written: the first packet (clock
 * snapshot), the interned data pending and the descriptors of tracks renamed since. */
static int w_prelude(Enc *e, Buf *out, int *done) {
    if (*done) return 0;
    *done = 1;
    if (!e->started) {
        e->started = 1;
        if (w_start(e, out, e->has_first ? e->first_ns : 0) < 0) return -1;
    }
    if (e->pending.n) {
        Buf body = {0};
        int bad = buf_lfield(&body, 12, e->pending.p, e->pending.n) < 0 || put_tail(e, &body) < 0 ||
                  frame(out, body.p, body.n) < 0;
        buf_free(&body);
        if (bad) return -1;
        e->pending.n = 0;
    }
    for (Py_ssize_t i = 0; i < e->nrenamed; i++) {
        if (reg_describe(e, e->renamed[i], out) < 0) return -1;
    }
    for (Py_ssize_t i = 0; i < e->nrenamed; i++) track_unref(e->renamed[i]);
    e->nrenamed = 0;
    return 0;
}
/* A record SliceWindow.ready gives: taken, then written, as the encoder writes each as it comes. */
static int w_taken(Enc *e, Buf *out, Record *r, int *begun) {
    if (win_taken(e, r) < 0 || w_prelude(e, out, begun) < 0) return -1;
    Track *t = r->track;
    if ((!t->described || (t->parent && !t->parent->described)) && reg_describe(e, t, out) < 0) return -1;
    if (w_record(e, out, r) < 0) return -1;
    rec_drop_bytes(r);
    return 0;
}
/* SliceWindow.ready (until keep remain) and the counter samples beyond held, written as they come:
 * no list of them is built first. */
static int enc_write(Enc *e, Buf *out, Py_ssize_t keep, Py_ssize_t held) {
    int begun = 0;
    if (keep < 0) keep = e->size;
    while (e->fn > keep) {
        Record *r = fifo_pop(e);
        if (r->attached) { rec_unref(r); continue; }
        if (r->nbefore) {
            /* sorted(before, key=-end): stable, outermost first */
            for (Py_ssize_t i = 1; i < r->nbefore; i++) {
                Record *x = r->before[i];
                Py_ssize_t j = i;
                while (j > 0 && -r->before[j - 1]->end > -x->end) { r->before[j] = r->before[j - 1]; j--; }
                r->before[j] = x;
            }
            for (Py_ssize_t i = 0; i < r->nbefore; i++) {
                Record *outer = r->before[i];
                if (!outer->written && w_taken(e, out, outer, &begun) < 0) { rec_unref(r); return -1; }
            }
            rec_clear_before(r);
        }
        int rc = w_taken(e, out, r, &begun);
        rec_unref(r);
        if (rc < 0) return -1;
    }
    for (Py_ssize_t i = 0; i < e->ncounters; i++) {
        Counter *c = &e->counters[i];
        while (c->n > held) {
            Sample s = heap_pop(c);
            Track *t = c->track;
            if (w_prelude(e, out, &begun) < 0 || reg_describe(e, t, out) < 0) return -1;
            Buf *b = &e->body;
            b->n = 0;
            if (put_type_track(b, TYPE_COUNTER, t) < 0 || buf_put(b, s.value, s.vn) < 0) return -1;
            if (w_event(e, out, s.ns, b->p, b->n) < 0) return -1;
        }
    }
    return 0;
}
static void interner_reset(Enc *e) {
    map_clear(&e->names); map_clear(&e->categories); map_clear(&e->keys); map_clear(&e->strings);
    map_clear(&e->caches); map_clear(&e->inline_);
    for (int i = 0; i < 4; i++) e->next[i] = 1;
    e->span_iid[0] = e->span_iid[1] = 0;
    e->pending.n = 0;
    e->icount = 0;
}
/* One event: 1 taken, 0 left out, -1 error. */
static int enc_event(Enc *e, Event *ev, int is_object) {
    if (!is_object) return 0;
    Val *ph = &ev->f[K_PH];
    if (ph->k != V_STR || ph->n != 1) return 0;
    switch (ph->s[0]) {
    case 'X': return h_slice(e, ev);
    case 'i': case 'I': case 'R': return h_instant(e, ev);
    case 'C': return h_counter(e, ev);
    case 'M': return h_metadata(e, ev);
    case 's': case 't': case 'f': return h_flow(e, ev, ph->s[0]);
    case 'B': case 'E': return h_begin_end(e, ev, ph->s[0] == 'B');
    case 'b': case 'e': case 'n': return h_async(e, ev, ph->s[0]);
    default: return 0;
    }
}
/* The end of PerfettoEncoder.encode: what is ready, and a cleared state when the tables are full. */
static PyObject *enc_flush(Enc *e) {
    Buf out = {0};
    PyObject *res = NULL;
    if (e->icount > e->max_entries) {
        if (enc_write(e, &out, 0, 64) < 0) goto done;
        interner_reset(e);
        if (w_cleared(e, &out) < 0) goto done;
    } else if (enc_write(e, &out, -1, 64) < 0) {
        goto done;
    }
    res = PyBytes_FromStringAndSize(out.p ? out.p : "", out.n);
done:
    buf_free(&out);
    return res;
}
static int parse_failed(int r, const char *what) {
    if (r == P_MEM) { if (!PyErr_Occurred()) PyErr_NoMemory(); return -1; }
    if (r == P_UNSUP) return unsupported("a JSON value the compiled encoder does not mirror (an integer beyond 64 bits, a repeated key)");
    return unsupported(what);
}

/* ===== the Python type ====================================================================== */
static PyTypeObject EncType;

static int Enc_init(Enc *e, PyObject *args, PyObject *kw) {
    static char *names[] = {"sequence_id", "uuid_salt", "window", "max_interned", NULL};
    unsigned long long seq = 1;
    PyObject *salt = NULL;
    Py_ssize_t window = 32768, max_interned = 50000;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$KOnn", names, &seq, &salt, &window, &max_interned)) return -1;
    e->sequence_id = seq ? seq : 1;
    e->salt = salt ? PyLong_AsUnsignedLongLongMask(salt) : 0;
    if (PyErr_Occurred()) return -1;
    e->size = window > 0 ? window : 0;
    e->max_entries = max_interned > 16 ? max_interned : 16;
    for (int i = 0; i < 4; i++) e->next[i] = 1;
    e->span_iid[0] = e->span_iid[1] = 0;
    e->own_memo.t = NULL; e->hot_span = e->hot_parent = NULL;
    map_init(&e->processes, track_unref_v); map_init(&e->threads, track_unref_v);
    tg_init(&e->timed, 4096, track_unref_v);
    map_init(&e->names, NULL); map_init(&e->categories, NULL); map_init(&e->keys, NULL);
    map_init(&e->strings, NULL); map_init(&e->caches, cache_free_v); map_init(&e->inline_, mem_free_v);
    map_init(&e->by_span, rec_unref_v); map_init(&e->starts, rec_unref_v); map_init(&e->by_start, rec_unref_v);
    Py_ssize_t awaiting = 2 * e->size > 1024 ? 2 * e->size : 1024;
    tg_init(&e->awaiting, awaiting, reclist_free_v);
    tg_init(&e->sources, 16384, NULL);
    tg_init(&e->written, 16384, mem_free_v);
    map_init(&e->last, rec_unref_v); map_init(&e->async_, track_unref_v); map_init(&e->own, track_unref_v);
    map_init(&e->lanes, mem_free_v); map_init(&e->first_lanes, mem_free_v); map_init(&e->elided, elided_free_v);
    tg_init(&e->parents, 16384, str_unref_v);
    /* the maps every slice adds to, sized for the first thousands of slices (see map_reserve); large
     * blocks, so their pages are only touched as entries come */
    if (map_reserve(&e->by_span, 8192) < 0 || map_reserve(&e->starts, 8192) < 0 || map_reserve(&e->last, 4096) < 0 ||
        map_reserve(e->parents.young, 8192) < 0 || map_reserve(e->written.young, 8192) < 0 ||
        map_reserve(e->sources.young, 4096) < 0) return -1;
    return 0;
}
static void Enc_dealloc(Enc *e) {
    map_free(&e->processes); map_free(&e->threads); tg_free(&e->timed);
    map_free(&e->names); map_free(&e->categories); map_free(&e->keys); map_free(&e->strings);
    map_free(&e->caches); map_free(&e->inline_);
    map_free(&e->by_span); map_free(&e->starts); map_free(&e->by_start);
    tg_free(&e->awaiting); tg_free(&e->sources); tg_free(&e->written);
    map_free(&e->last); map_free(&e->async_); map_free(&e->own);
    map_free(&e->lanes); map_free(&e->first_lanes); map_free(&e->elided);
    tg_free(&e->parents);
    while (e->fn) rec_unref(fifo_pop(e));
    PyMem_Free(e->fifo);
    for (Py_ssize_t i = 0; i < e->ncounters; i++) { track_unref(e->counters[i].track); PyMem_Free(e->counters[i].h); }
    PyMem_Free(e->counters);
    for (Py_ssize_t i = 0; i < e->nrenamed; i++) track_unref(e->renamed[i]);
    PyMem_Free(e->renamed);
    track_unref(e->global);
    buf_free(&e->pending); buf_free(&e->key); buf_free(&e->key2); buf_free(&e->body); buf_free(&e->text); buf_free(&e->ids); buf_free(&e->tidkey);
    buf_free(&e->wdesc);
    arena_free(&e->arena);
    PyMem_Free(e->ev.args);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* encode(blob): the events of a blob (JSON values joined with ","), as PerfettoEncoder.encode
 * of the list json.loads(b"[" + blob + b"]") gives. */
static PyObject *Enc_encode(Enc *e, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Parser ps = {view.buf, (const char *)view.buf + view.len, &e->arena, 0, 0};
    long long count = 0;
    int failed = 0;
    skip_ws(&ps);
    while (ps.p < ps.end) {
        int is_object = 0;
        int r = parse_event(&ps, &e->ev, &is_object);
        if (r) { failed = parse_failed(r, "not a blob of JSON values"); break; }
        count++;
        r = enc_event(e, &e->ev, is_object);
        arena_reset(&e->arena);
        if (r < 0) { failed = 1; break; }
        if (r == 0) e->skipped++;
        skip_ws(&ps);
        if (ps.p >= ps.end) break;
        if (*ps.p != ',') { failed = unsupported("not a blob of JSON values"); break; }
        ps.p++;
        skip_ws(&ps);
        if (ps.p >= ps.end) { failed = unsupported("a trailing comma"); break; }
    }
    PyBuffer_Release(&view);
    if (failed) return NULL;
    e->events += count;
    return enc_flush(e);
}
/* The pid a line's event is written with: mapping[pid]; 0 found (*out set), 1 not in the mapping. */
static int mapped_pid(PyObject *mapping, const Val *pid, Val *out, PyObject **keep) {
    PyObject *key = pid->k == V_INT ? PyLong_FromLongLong(pid->i) : PyUnicode_DecodeUTF8(pid->s, pid->n, "strict");
    if (!key) return -1;
    PyObject *found = PyDict_GetItemWithError(mapping, key);
    Py_DECREF(key);
    if (!found) return PyErr_Occurred() ? -1 : 1;
    *out = *pid;
    if (PyLong_CheckExact(found)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(found, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) return unsupported("a pid beyond 64 bits");
        out->k = V_INT; out->i = v;
    } else if (PyUnicode_CheckExact(found)) {
        Py_ssize_t n;
        const char *text = PyUnicode_AsUTF8AndSize(found, &n);
        if (!text) return -1;
        out->k = V_STR; out->s = text; out->n = n; out->ascii = PyUnicode_IS_ASCII(found);
        Py_INCREF(found);
        *keep = found;
    } else {
        return unsupported("a pid mapped to neither an integer nor a string");
    }
    return 0;
}
#define MARKER_PREFIX "{\"ph\":\"M\",\"name\":\"otel_rl.batch\","
/* encode_lines(data, end, mapping): what the converter's fast path (fast_path.scan_chrome_lines)
 * and one write_blob of its events do, for whole JSONL lines of data[:end]: each line's pid is
 * written as mapping says; lines whose pid is not in mapping yet are handed back, in order, to be
 * claimed and written after the others, as the fast path does. A line that is not a JSON object
 * with an integer or string pid (the fast path reports it) raises Unsupported.
 * Returns (packets, events, lines, unresolved [(index, line)]). */
static PyObject *Enc_encode_lines(Enc *e, PyObject *args) {
    Py_buffer view;
    Py_ssize_t end;
    PyObject *mapping;
    if (!PyArg_ParseTuple(args, "y*nO!", &view, &end, &PyDict_Type, &mapping)) return NULL;
    if (end < 0 || end > view.len) end = view.len;
    const char *data = view.buf, *stop = data + end;
    PyObject *unresolved = PyList_New(0), *res = NULL;
    long long count = 0;
    Py_ssize_t index = 0, lines = 0;
    const size_t marker_n = sizeof(MARKER_PREFIX) - 1;
    /* The pid of the last line, and what it maps to: most files hold one. */
    Val last_pid = {V_ABSENT}, last_new = {V_ABSENT};
    PyObject *last_keep = NULL;
    char last_text[64];
    if (!unresolved) goto done;
    for (const char *line = data; line < stop; index++) {
        lines++;
        /* (the marker's text holds no newline: matching it, the line is at least that long) */
        if ((size_t)(stop - line) >= marker_n && memcmp(line, MARKER_PREFIX, marker_n) == 0) {
            const char *nl = memchr(line, '\n', stop - line);
            line = nl ? nl + 1 : stop;
            continue;
        }
        /* parsed to the block's end: the line ends where its event does (see ws_slow) */
        Parser ps = {line, stop, &e->arena, 0, 1};
        int is_object = 0;
        int r = parse_event(&ps, &e->ev, &is_object);
        const char *eol = stop;
        if (r == 0) {
            if (ps.p < stop && *ps.p != '\n') {  /* (white space before the newline: rare) */
                skip_ws(&ps);
                if (ps.p < stop && *ps.p != '\n') r = P_ERR;
            }
            eol = ps.p;
        }
        if (r) { parse_failed(r, "a line that is not one JSON value (the fast path reports it)"); goto done; }
        if (!is_object) { unsupported("a line that is not a JSON object (the fast path reports it)"); goto done; }
        Val *pid = &e->ev.f[K_PID];
        if (pid->k != V_ABSENT && pid->k != V_NULL) {
            if (pid->k != V_INT && pid->k != V_STR) { unsupported("a pid that is not an integer or string"); goto done; }
            int same = last_pid.k == pid->k && (pid->k == V_INT ? last_pid.i == pid->i :
                       last_pid.n == pid->n && memcmp(last_pid.s, pid->s, pid->n) == 0);
            if (!same) {
                PyObject *keep = NULL;
                Val mapped;
                int m = mapped_pid(mapping, pid, &mapped, &keep);
                if (m < 0) goto done;
                if (m == 1) {
                    PyObject *item = Py_BuildValue("(ny#)", index, line, (Py_ssize_t)(eol - line));
                    if (!item || PyList_Append(unresolved, item) < 0) { Py_XDECREF(item); goto done; }
                    Py_DECREF(item);
                    arena_reset(&e->arena);
                    line = eol + 1;
                    continue;
                }
                if (pid->k == V_STR && pid->n > (Py_ssize_t)sizeof last_text) {
                    last_pid.k = V_ABSENT;  /* too long to remember: looked up each time */
                } else {
                    last_pid = *pid;
                    if (pid->k == V_STR) { memcpy(last_text, pid->s, pid->n); last_pid.s = last_text; }
                }
                Py_XSETREF(last_keep, keep);
                last_new = mapped;
            }
            *pid = last_new;
        }
        r = enc_event(e, &e->ev, 1);
        arena_reset(&e->arena);
        if (r < 0) goto done;
        if (r == 0) e->skipped++;
        count++;
        line = eol + 1;
    }
    e->events += count;
    PyObject *packets = enc_flush(e);
    if (packets) res = Py_BuildValue("(NLnO)", packets, count, lines, unresolved);
done:
    Py_XDECREF(last_keep);
    Py_XDECREF(unresolved);
    PyBuffer_Release(&view);
    return res;
}
static PyObject *Enc_finish(Enc *e, PyObject *unused) {
    Buf out = {0};
    if (enc_write(e, &out, 0, 0) < 0) { buf_free(&out); return NULL; }
    PyObject *res = PyBytes_FromStringAndSize(out.p ? out.p : "", out.n);
    buf_free(&out);
    return res;
}
static PyObject *Enc_get_events(Enc *e, void *c) { return PyLong_FromLongLong(e->events); }
static PyObject *Enc_get_skipped(Enc *e, void *c) { return PyLong_FromLongLong(e->skipped); }
static PyObject *Enc_get_sequence(Enc *e, void *c) { return PyLong_FromUnsignedLongLong(e->sequence_id); }

static PyMethodDef Enc_methods[] = {
    {"encode", (PyCFunction)Enc_encode, METH_O,
     "encode(blob) -> bytes: the packets ready after the events of blob (JSON values joined with ',')."},
    {"encode_lines", (PyCFunction)Enc_encode_lines, METH_VARARGS,
     "encode_lines(data, end, mapping) -> (packets, events, lines, unresolved): JSONL lines, as the fast path reads them."},
    {"finish", (PyCFunction)Enc_finish, METH_NOARGS, "finish() -> bytes: everything still held back."},
    {NULL}
};
static PyGetSetDef Enc_getset[] = {
    {"events", (getter)Enc_get_events, NULL, "Events read.", NULL},
    {"skipped", (getter)Enc_get_skipped, NULL, "Events left out (not understood or not valid).", NULL},
    {"sequence_id", (getter)Enc_get_sequence, NULL, "The packet sequence written.", NULL},
    {NULL}
};
static PyTypeObject EncType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "otel_rl._internal.encode.perfetto._native.NativeEncoder",
    .tp_basicsize = sizeof(Enc),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PerfettoEncoder's compiled twin: Chrome trace JSON text in, the same TracePacket bytes out.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Enc_init,
    .tp_dealloc = (destructor)Enc_dealloc,
    .tp_methods = Enc_methods,
    .tp_getset = Enc_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native",
    "The Perfetto encoder's compiled twin (see encoder.py; the same bytes for the same events).", -1, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&EncType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Unsupported = PyErr_NewExceptionWithDoc("otel_rl._internal.encode.perfetto._native.Unsupported",
        "Input the compiled encoder does not mirror exactly: convert with the Python encoder instead.",
        PyExc_Exception, NULL);
    if (!Unsupported) { Py_DECREF(m); return NULL; }
    Py_INCREF(Unsupported);
    Py_INCREF(&EncType);
    if (PyModule_AddObject(m, "Unsupported", Unsupported) < 0 ||
        PyModule_AddObject(m, "NativeEncoder", (PyObject *)&EncType) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
