/*
 * kqlab.serde._cjson -- JSON objects straight into Arrow column buffers (and, beside them,
 * every value's Confluent wire header in one pass: wire_heads at the end of the file).
 *
 * The definition of a JSON column is one orjson.loads per value, then pa.array over the
 * objects (kqlab.serde.decode._decode_json_objects).  Arrow's JSON reader costs about as
 * much CPU per value as orjson.loads; this parser costs a fraction of either, because it
 * writes each scalar straight into the column it belongs to and never builds an object.
 * kqlab.serde.json_arrow.decode_objects calls it first and falls back to Arrow's reader (or
 * the per-record definition) whenever it says it cannot be sure, so it only has to be exact
 * where it answers:
 *
 * - A row is first *validated* (a strict RFC 8259 recogniser: number grammar, string
 *   escapes and control characters, UTF-8 including surrogates and overlongs, whitespace).
 *   Anything it does not accept -- invalid JSON, but also arrays, nesting deeper than
 *   MAX_DEPTH, integers of more than 18 digits, numbers near the double range, a document
 *   that is not an object or null -- makes the row "refused" (status 2): it is a null row
 *   here and the caller asks orjson about it (orjson's error message is the definition;
 *   should orjson accept it, the caller drops this parser's answer for the chunk).
 *   So a row accepted here is one orjson accepts.
 * - Accepted rows are *built* with pa.array's inference: struct fields in order of first
 *   appearance, null < int64 < double, strings, booleans, nested objects as structs.
 *   What pa.array refuses or this parser does not model (types that conflict, an integer
 *   beyond 2**53 beside doubles, a duplicate key, string data beyond 2 GB) makes the whole
 *   call return None.
 * - Doubles: Clinger's fast path (<= 15 significant digits, |exponent| <= 22: one exact
 *   multiplication or division, correctly rounded) else strtod_l in the C locale; both
 *   correctly rounded, as orjson is (tests hold them equal on random numbers).
 *
 * The GIL is released while a range of rows is parsed; buffers are plain malloc'd memory
 * handed back as bytes objects (one copy, at the end).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#endif

#define MAX_DEPTH 64
#define MAX_INT_DIGITS 18
#define EXACT 9007199254740992LL /* 2**53 */

/* word-at-a-time byte search: the lowest flagged byte of each mask is exact */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t load8(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}
static inline uint64_t zero_bytes(uint64_t v) { return (v - ONES) & ~v & HIGHS; }
static inline uint64_t eq_bytes(uint64_t v, uint8_t b) { return zero_bytes(v ^ (ONES * b)); }
static inline uint64_t below_bytes(uint64_t v, uint8_t n) { return (v - ONES * n) & ~v & HIGHS; }

enum { T_NULL = 0, T_BOOL = 1, T_INT = 2, T_DBL = 3, T_STR = 4, T_STRUCT = 5 };
enum { ROW_OBJECT = 0, ROW_NULL = 1, ROW_REFUSED = 2 };

static locale_t c_locale;

/* ---------------------------------------------------------------- growable buffers ------ */
typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (LIKELY(b->len + extra <= b->cap)) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (UNLIKELY(b->len + n > b->cap) && buf_reserve(b, n)) return -1;
    char *d = b->p + b->len;
    const char *s = src;
    if (n >= 8 && n <= 16) { /* short strings: two overlapping words, no call */
        uint64_t x, y;
        memcpy(&x, s, 8);
        memcpy(&y, s + n - 8, 8);
        memcpy(d, &x, 8);
        memcpy(d + n - 8, &y, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t x, y;
        memcpy(&x, s, 4);
        memcpy(&y, s + n - 4, 4);
        memcpy(d, &x, 4);
        memcpy(d + n - 4, &y, 4);
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++) d[i] = s[i];
    } else {
        memcpy(d, s, n);
    }
    b->len += n;
    return 0;
}

static inline int buf_byte(Buf *b, uint8_t v) {
    if (UNLIKELY(b->len + 1 > b->cap) && buf_reserve(b, 1)) return -1;
    b->p[b->len++] = (char)v;
    return 0;
}

/* ---------------------------------------------------------------- column builders ------- */
typedef struct Builder Builder;
struct Builder {
    int type;
    int64_t len, nulls;
    int64_t hint; /* rows it will end with (buffers are reserved for them) */
    Buf valid; /* one byte per row */
    Buf data;  /* bool: a byte per row; int64 / double: 8 bytes; string: the UTF-8 bytes */
    Buf offs;  /* string: int32 offsets, len + 1 of them once typed */
    int nfields, capfields;
    Builder **fields;
    char **names;
    size_t *namelens;
};

/* failures while building: out of memory, or a column this parser cannot give */
enum { B_OK = 0, B_NOMEM = -1, B_GIVEUP = -2 };

static Builder *builder_new(void) { return calloc(1, sizeof(Builder)); }

static void builder_free(Builder *b) {
    if (!b) return;
    free(b->valid.p);
    free(b->data.p);
    free(b->offs.p);
    for (int i = 0; i < b->nfields; i++) {
        builder_free(b->fields[i]);
        free(b->names[i]);
    }
    free(b->fields);
    free(b->names);
    free(b->namelens);
    free(b);
}

static int append_null(Builder *b);

static int append_nulls(Builder *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (append_null(b)) return B_NOMEM;
    return B_OK;
}

static int append_null(Builder *b) {
    if (buf_byte(&b->valid, 0)) return B_NOMEM;
    b->len++;
    b->nulls++;
    switch (b->type) {
    case T_BOOL:
        return buf_byte(&b->data, 0) ? B_NOMEM : B_OK;
    case T_INT:
    case T_DBL: {
        int64_t z = 0;
        return buf_put(&b->data, &z, 8) ? B_NOMEM : B_OK;
    }
    case T_STR: {
        int32_t o = (int32_t)b->data.len;
        return buf_put(&b->offs, &o, 4) ? B_NOMEM : B_OK;
    }
    case T_STRUCT:
        for (int i = 0; i < b->nfields; i++)
            if (append_null(b->fields[i])) return B_NOMEM;
        return B_OK;
    default:
        return B_OK;
    }
}

/* A column of nulls so far takes its first type: the rows it has become typed nulls. */
static int become(Builder *b, int type) {
    int64_t n = b->len;
    size_t rows = (size_t)(b->hint > n ? b->hint : n);
    b->type = type;
    switch (type) {
    case T_BOOL:
        if (buf_reserve(&b->data, rows)) return B_NOMEM;
        memset(b->data.p, 0, (size_t)n);
        b->data.len = (size_t)n;
        return B_OK;
    case T_INT:
    case T_DBL:
        if (buf_reserve(&b->data, rows * 8)) return B_NOMEM;
        memset(b->data.p, 0, (size_t)n * 8);
        b->data.len = (size_t)n * 8;
        return B_OK;
    case T_STR:
        if (buf_reserve(&b->offs, (rows + 1) * 4) || buf_reserve(&b->data, rows * 8))
            return B_NOMEM;
        memset(b->offs.p, 0, (size_t)(n + 1) * 4);
        b->offs.len = (size_t)(n + 1) * 4;
        return B_OK;
    default:
        return B_OK; /* a struct's rows so far are null; children backfill when created */
    }
}

static inline int mark_valid(Builder *b) {
    if (buf_byte(&b->valid, 1)) return B_NOMEM;
    b->len++;
    return B_OK;
}

static int append_bool(Builder *b, int v) {
    if (b->type == T_NULL) {
        int r = become(b, T_BOOL);
        if (r) return r;
    } else if (b->type != T_BOOL) {
        return B_GIVEUP;
    }
    if (buf_byte(&b->data, (uint8_t)v)) return B_NOMEM;
    return mark_valid(b);
}

static int append_int(Builder *b, int64_t v) {
    if (b->type == T_NULL) {
        int r = become(b, T_INT);
        if (r) return r;
    }
    if (b->type == T_INT) {
        if (buf_put(&b->data, &v, 8)) return B_NOMEM;
    } else if (b->type == T_DBL) {
        if (v > EXACT || v < -EXACT) return B_GIVEUP; /* pa.array refuses it */
        double d = (double)v;
        if (buf_put(&b->data, &d, 8)) return B_NOMEM;
    } else {
        return B_GIVEUP;
    }
    return mark_valid(b);
}

static int append_double(Builder *b, double d) {
    if (b->type == T_NULL) {
        int r = become(b, T_DBL);
        if (r) return r;
    } else if (b->type == T_INT) { /* ints so far become doubles, as pa.array infers */
        int64_t *x = (int64_t *)b->data.p;
        for (int64_t i = 0; i < b->len; i++) {
            if (x[i] > EXACT || x[i] < -EXACT) return B_GIVEUP;
            double v = (double)x[i];
            memcpy(&x[i], &v, 8);
        }
        b->type = T_DBL;
    } else if (b->type != T_DBL) {
        return B_GIVEUP;
    }
    if (buf_put(&b->data, &d, 8)) return B_NOMEM;
    return mark_valid(b);
}

/* ---------------------------------------------------------------- the recogniser -------- */
static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static inline int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static inline int hex4(const uint8_t *p) {
    int a = hexval(p[0]), b = hexval(p[1]), c = hexval(p[2]), d = hexval(p[3]);
    if ((a | b | c | d) < 0) return -1;
    return (a << 12) | (b << 8) | (c << 4) | d;
}

/* p at the opening quote; returns past the closing quote, NULL when not accepted */
static const uint8_t *check_string(const uint8_t *p, const uint8_t *end) {
    p++;
    for (;;) {
        while (p + 8 <= end) { /* skip plain ASCII eight bytes at a time */
            uint64_t w = load8(p);
            uint64_t m = eq_bytes(w, '"') | eq_bytes(w, '\\') | below_bytes(w, 0x20) | (w & HIGHS);
            if (m) {
                p += __builtin_ctzll(m) >> 3;
                break;
            }
            p += 8;
        }
        if (p >= end) return NULL;
        uint8_t c = *p;
        if (c == '"') return p + 1;
        if (c == '\\') {
            if (p + 1 >= end) return NULL;
            uint8_t e = p[1];
            if (e == 'u') {
                if (p + 6 > end) return NULL;
                int u = hex4(p + 2);
                if (u < 0) return NULL;
                p += 6;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (p + 6 > end || p[0] != '\\' || p[1] != 'u') return NULL;
                    int lo = hex4(p + 2);
                    if (lo < 0xDC00 || lo > 0xDFFF) return NULL;
                    p += 6;
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return NULL;
                }
                continue;
            }
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            return NULL;
        }
        if (c < 0x20) return NULL;
        if (c < 0x80) {
            p++;
            continue;
        }
        /* UTF-8: no overlongs, no surrogates, nothing beyond U+10FFFF */
        if (c >= 0xC2 && c <= 0xDF) {
            if (p + 2 > end || (p[1] & 0xC0) != 0x80) return NULL;
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (p + 3 > end) return NULL;
            uint8_t lo = 0x80, hi = 0xBF;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
            if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80) return NULL;
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (p + 4 > end) return NULL;
            uint8_t lo = 0x80, hi = 0xBF;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
            if (p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
                return NULL;
            p += 4;
        } else {
            return NULL;
        }
    }
}

/* p at '-' or a digit; returns past the number, NULL when not accepted (or not modelled) */
static const uint8_t *check_number(const uint8_t *p, const uint8_t *end) {
    if (*p == '-') p++;
    if (p >= end) return NULL;
    const uint8_t *digits = p;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return NULL;
    }
    long intdigits = (long)(p - digits);
    int real = 0;
    long fracdigits = 0;
    if (p < end && *p == '.') {
        p++;
        const uint8_t *f = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        fracdigits = (long)(p - f);
        if (!fracdigits) return NULL;
        real = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const uint8_t *x = p;
        long ex = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (ex < 100000) ex = ex * 10 + (*p - '0');
            p++;
        }
        if (p == x) return NULL;
        if (ex > 250) return NULL; /* near the double range: orjson's call */
        real = 1;
    }
    if (intdigits + fracdigits > 250) return NULL;
    if (!real && intdigits > MAX_INT_DIGITS) return NULL; /* orjson reads those apart */
    return p;
}

static const uint8_t *check_value(const uint8_t *p, const uint8_t *end, int depth);

static const uint8_t *check_object(const uint8_t *p, const uint8_t *end, int depth) {
    if (depth > MAX_DEPTH) return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        if (p >= end || *p != '"') return NULL;
        p = check_string(p, end);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return NULL;
        p = skip_ws(p + 1, end);
        p = check_value(p, end, depth);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
}

static const uint8_t *check_value(const uint8_t *p, const uint8_t *end, int depth) {
    if (p >= end) return NULL;
    switch (*p) {
    case '"':
        return check_string(p, end);
    case '{':
        return check_object(p, end, depth + 1);
    case 't':
        return (end - p >= 4 && memcmp(p, "true", 4) == 0) ? p + 4 : NULL;
    case 'f':
        return (end - p >= 5 && memcmp(p, "false", 5) == 0) ? p + 5 : NULL;
    case 'n':
        return (end - p >= 4 && memcmp(p, "null", 4) == 0) ? p + 4 : NULL;
    default:
        if (*p == '-' || (*p >= '0' && *p <= '9')) return check_number(p, end);
        return NULL; /* arrays are left to the other readers, as is anything invalid */
    }
}

/* ---------------------------------------------------------------- the builder pass ------ */
/* The end of a recognised string's run of plain bytes: its closing quote or a backslash. */
static inline const uint8_t *run_end(const uint8_t *p, const uint8_t *end) {
    while (p + 8 <= end) {
        uint64_t w = load8(p);
        uint64_t m = eq_bytes(w, '"') | eq_bytes(w, '\\');
        if (m) return p + (__builtin_ctzll(m) >> 3);
        p += 8;
    }
    while (*p != '"' && *p != '\\') p++;
    return p;
}

/* Decode a recognised string (p at the opening quote, end the value's end) into out;
 * returns past the closing quote. */
static const uint8_t *read_string(const uint8_t *p, const uint8_t *end, Buf *out) {
    p++;
    for (;;) {
        const uint8_t *run = p;
        p = run_end(p, end);
        if (p > run && buf_put(out, run, (size_t)(p - run))) return NULL;
        if (*p == '"') return p + 1;
        uint8_t e = p[1];
        char c;
        switch (e) {
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            uint32_t u = (uint32_t)hex4(p + 2);
            p += 6;
            if (u >= 0xD800 && u <= 0xDBFF) {
                uint32_t lo = (uint32_t)hex4(p + 2);
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            uint8_t tmp[4];
            size_t k;
            if (u < 0x80) {
                tmp[0] = (uint8_t)u;
                k = 1;
            } else if (u < 0x800) {
                tmp[0] = (uint8_t)(0xC0 | (u >> 6));
                tmp[1] = (uint8_t)(0x80 | (u & 0x3F));
                k = 2;
            } else if (u < 0x10000) {
                tmp[0] = (uint8_t)(0xE0 | (u >> 12));
                tmp[1] = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
                tmp[2] = (uint8_t)(0x80 | (u & 0x3F));
                k = 3;
            } else {
                tmp[0] = (uint8_t)(0xF0 | (u >> 18));
                tmp[1] = (uint8_t)(0x80 | ((u >> 12) & 0x3F));
                tmp[2] = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
                tmp[3] = (uint8_t)(0x80 | (u & 0x3F));
                k = 4;
            }
            if (buf_put(out, tmp, k)) return NULL;
            continue;
        }
        default: c = (char)e; break; /* " \\ / */
        }
        if (buf_byte(out, (uint8_t)c)) return NULL;
        p += 2;
    }
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A recognised number [p, q): int64 (*is_int) or a correctly rounded double. */
static int read_number(const uint8_t *p, const uint8_t *q, int64_t *iv, double *dv,
                       int *is_int) {
    const uint8_t *s = p;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    uint64_t m = 0;
    int sig = 0; /* significant digits gathered in m (leading zeros not counted) */
    int drop = 0; /* digits that did not fit m */
    long scale = 0;
    while (p < q && *p >= '0' && *p <= '9') {
        if (sig < 19) {
            m = m * 10 + (uint64_t)(*p - '0');
            if (m) sig++;
        } else {
            drop = 1;
            scale++;
        }
        p++;
    }
    if (p == q) { /* an integer of <= 18 digits */
        *is_int = 1;
        *iv = neg ? -(int64_t)m : (int64_t)m;
        return 0;
    }
    *is_int = 0;
    if (*p == '.') {
        p++;
        while (p < q && *p >= '0' && *p <= '9') {
            if (sig < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                if (m) sig++;
                scale--;
            } else {
                drop = 1;
            }
            p++;
        }
    }
    long ex = 0;
    if (p < q && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (*p == '+' || *p == '-') {
            eneg = *p == '-';
            p++;
        }
        while (p < q) ex = ex * 10 + (*p++ - '0');
        if (eneg) ex = -ex;
    }
    long e10 = scale + ex;
    if (!drop && m < (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        double d = (double)m;
        d = e10 < 0 ? d / POW10[-e10] : d * POW10[e10];
        *dv = neg ? -d : d;
        return 0;
    }
    char tmp[512];
    size_t n = (size_t)(q - s);
    if (n >= sizeof tmp) return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    char *endp;
    double d = strtod_l(tmp, &endp, c_locale);
    if ((size_t)(endp - tmp) != n || !isfinite(d)) return -1;
    *dv = d;
    return 0;
}

typedef struct {
    Buf key;      /* scratch for a key with escapes */
    int64_t rows; /* rows of this call: every column ends with exactly this many */
} Scratch;

static int build_value(Builder *b, const uint8_t **pp, const uint8_t *end, Scratch *s);

static inline int same_name(const char *a, const uint8_t *b, size_t len) {
    if (len >= 8 && len <= 16) { /* most keys: two overlapping words */
        uint64_t x, y, u, v;
        memcpy(&x, a, 8);
        memcpy(&u, b, 8);
        memcpy(&y, a + len - 8, 8);
        memcpy(&v, b + len - 8, 8);
        return x == u && y == v;
    }
    if (len >= 4 && len < 8) {
        uint32_t x, y, u, v;
        memcpy(&x, a, 4);
        memcpy(&u, b, 4);
        memcpy(&y, a + len - 4, 4);
        memcpy(&v, b + len - 4, 4);
        return x == u && y == v;
    }
    return memcmp(a, b, len) == 0;
}

static int find_field(Builder *st, const uint8_t *name, size_t len, int guess) {
    if (guess < st->nfields && st->namelens[guess] == len && same_name(st->names[guess], name, len))
        return guess;
    for (int i = 0; i < st->nfields; i++)
        if (st->namelens[i] == len && same_name(st->names[i], name, len)) return i;
    return -1;
}

static int add_field(Builder *st, const uint8_t *name, size_t len, int64_t row, Scratch *s) {
    if (st->nfields == st->capfields) {
        int cap = st->capfields ? st->capfields * 2 : 8;
        Builder **f = realloc(st->fields, sizeof(Builder *) * (size_t)cap);
        if (!f) return -1;
        st->fields = f;
        char **nm = realloc(st->names, sizeof(char *) * (size_t)cap);
        if (!nm) return -1;
        st->names = nm;
        size_t *nl = realloc(st->namelens, sizeof(size_t) * (size_t)cap);
        if (!nl) return -1;
        st->namelens = nl;
        st->capfields = cap;
    }
    Builder *c = builder_new();
    char *copy = malloc(len ? len : 1);
    if (!c || !copy || buf_reserve(&c->valid, (size_t)s->rows)) {
        builder_free(c);
        free(copy);
        return -1;
    }
    memcpy(copy, name, len);
    c->hint = s->rows;
    if (append_nulls(c, row)) {
        builder_free(c);
        free(copy);
        return -1;
    }
    st->fields[st->nfields] = c;
    st->names[st->nfields] = copy;
    st->namelens[st->nfields] = len;
    return st->nfields++;
}

#define SKIP_WS(p) while (*(p) == ' ' || *(p) == '\n' || *(p) == '\r' || *(p) == '\t') (p)++

/* p at '{' of a recognised object ending before end: one row of the struct builder st */
static int build_object(Builder *st, const uint8_t **pp, const uint8_t *end, Scratch *s) {
    if (st->type == T_NULL) {
        st->type = T_STRUCT;
    } else if (st->type != T_STRUCT) {
        return B_GIVEUP;
    }
    int64_t row = st->len;
    const uint8_t *p = *pp + 1;
    int set = 0, guess = 0;
    for (;;) {
        SKIP_WS(p);
        if (*p == '}') break;
        if (*p == ',') {
            p++;
            continue;
        }
        const uint8_t *name = p + 1;
        const uint8_t *q = run_end(name, end);
        size_t len;
        if (LIKELY(*q == '"')) { /* no escapes: the key's bytes as they are */
            len = (size_t)(q - name);
            p = q + 1;
        } else {
            s->key.len = 0;
            p = read_string(p, end, &s->key);
            if (!p) return B_NOMEM;
            name = (const uint8_t *)(s->key.p ? s->key.p : "");
            len = s->key.len;
        }
        SKIP_WS(p);
        p++; /* the colon */
        SKIP_WS(p);
        int f = find_field(st, name, len, guess);
        if (f < 0) {
            f = add_field(st, name, len, row, s);
            if (f < 0) return B_NOMEM;
        } else if (st->fields[f]->len > row) {
            return B_GIVEUP; /* a duplicate key: orjson keeps the last, pa.array its place */
        }
        int r = build_value(st->fields[f], &p, end, s);
        if (r) return r;
        set++;
        guess = f + 1;
    }
    *pp = p + 1;
    if (set < st->nfields)
        for (int i = 0; i < st->nfields; i++)
            if (st->fields[i]->len == row && append_null(st->fields[i])) return B_NOMEM;
    return mark_valid(st);
}

static int build_value(Builder *b, const uint8_t **pp, const uint8_t *end, Scratch *s) {
    const uint8_t *p = *pp;
    switch (*p) {
    case '"': {
        if (b->type == T_NULL) {
            int r = become(b, T_STR);
            if (r) return r;
        } else if (b->type != T_STR) {
            return B_GIVEUP;
        }
        const uint8_t *q = run_end(p + 1, end);
        if (LIKELY(*q == '"')) {
            if (buf_put(&b->data, p + 1, (size_t)(q - p - 1))) return B_NOMEM;
            p = q + 1;
        } else {
            p = read_string(p, end, &b->data);
            if (!p) return B_NOMEM;
        }
        if (b->data.len > INT32_MAX) return B_GIVEUP;
        int32_t o = (int32_t)b->data.len;
        if (buf_put(&b->offs, &o, 4)) return B_NOMEM;
        *pp = p;
        return mark_valid(b);
    }
    case '{':
        return build_object(b, pp, end, s);
    case 't':
        *pp = p + 4;
        return append_bool(b, 1);
    case 'f':
        *pp = p + 5;
        return append_bool(b, 0);
    case 'n':
        *pp = p + 4;
        return append_null(b);
    default: {
        const uint8_t *q = p + 1;
        while ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' ||
               *q == '-')
            q++;
        int64_t iv = 0;
        double dv = 0;
        int is_int = 0;
        if (read_number(p, q, &iv, &dv, &is_int)) return B_GIVEUP;
        *pp = q;
        return is_int ? append_int(b, iv) : append_double(b, dv);
    }
    }
}

/* ---------------------------------------------------------------- Python objects -------- */
/* A builder's buffer handed to Python as it is (no copy): freed when Arrow lets go of it. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} Owned;

static void owned_dealloc(Owned *o) {
    free(o->p);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int owned_getbuffer(Owned *o, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)o, o->p ? o->p : (char *)"", o->len, 1, flags);
}

static PyBufferProcs owned_as_buffer = {(getbufferproc)owned_getbuffer, NULL};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kqlab.serde._cjson.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column buffer built by parse_objects (read-only, zero-copy).",
};

/* the buffer's memory moves into a Python object; the builder no longer owns it */
static PyObject *bytes_of(Buf *b) {
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o) return NULL;
    o->p = b->p;
    o->len = (Py_ssize_t)b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

/* one byte per row -> Arrow's bits (LSB first) */
static PyObject *pack_bits(const Buf *bytes, int64_t n) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 7) / 8));
    if (!out) return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    const uint8_t *v = (const uint8_t *)bytes->p;
    memset(o, 0, (size_t)((n + 7) / 8));
    for (int64_t i = 0; i < n; i++)
        if (v[i]) o[i >> 3] |= (uint8_t)(1u << (i & 7));
    return out;
}

/* (type, length, null_count, validity bits or None, a, b): see json_arrow._from_node */
static PyObject *node_of(Builder *b) {
    PyObject *validity = Py_None, *a = Py_None, *c = Py_None;
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    if (b->nulls && b->type != T_NULL) {
        Py_DECREF(validity);
        validity = pack_bits(&b->valid, b->len);
        if (!validity) goto fail;
    }
    switch (b->type) {
    case T_BOOL:
        Py_DECREF(a);
        a = pack_bits(&b->data, b->len);
        break;
    case T_INT:
    case T_DBL:
        Py_DECREF(a);
        a = bytes_of(&b->data);
        break;
    case T_STR:
        Py_DECREF(a);
        Py_DECREF(c);
        a = bytes_of(&b->offs);
        c = bytes_of(&b->data);
        if (!c) goto fail;
        break;
    case T_STRUCT:
        Py_DECREF(a);
        a = PyList_New(b->nfields);
        if (!a) goto fail;
        for (int i = 0; i < b->nfields; i++) {
            PyObject *name = PyUnicode_DecodeUTF8(b->names[i], (Py_ssize_t)b->namelens[i], NULL);
            PyObject *child = name ? node_of(b->fields[i]) : NULL;
            PyObject *pair = child ? PyTuple_Pack(2, name, child) : NULL;
            Py_XDECREF(name);
            Py_XDECREF(child);
            if (!pair) goto fail;
            PyList_SET_ITEM(a, i, pair);
        }
        break;
    default:
        break;
    }
    if (!a) goto fail;
    return Py_BuildValue("(iLLNNN)", b->type, (long long)b->len, (long long)b->nulls, validity,
                         a, c);
fail:
    Py_XDECREF(validity);
    Py_XDECREF(a);
    Py_XDECREF(c);
    return NULL;
}

typedef struct {
    Py_buffer data, starts, ends, valid;
} Views;

static void release(Views *v) {
    if (v->data.obj) PyBuffer_Release(&v->data);
    if (v->starts.obj) PyBuffer_Release(&v->starts);
    if (v->ends.obj) PyBuffer_Release(&v->ends);
    if (v->valid.obj) PyBuffer_Release(&v->valid);
}

/* parse_objects(data, starts, ends, valid, lo, hi) -> None | (status bytes, root node)
 *
 * data: the values' bytes; starts, ends: int64 positions of each value in data; valid:
 * one byte per value (0: no value, a null row).  Rows lo:hi are parsed.  Status per row:
 * 0 an object, 1 null (no value, or the document null), 2 refused (ask orjson).  None
 * when this parser cannot give pa.array's column for these rows. */
static PyObject *parse_objects(PyObject *self, PyObject *args) {
    PyObject *od, *os, *oe, *ov;
    Py_ssize_t lo, hi;
    Views v;
    memset(&v, 0, sizeof v);
    if (!PyArg_ParseTuple(args, "OOOOnn", &od, &os, &oe, &ov, &lo, &hi)) return NULL;
    if (PyObject_GetBuffer(od, &v.data, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(os, &v.starts, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(oe, &v.ends, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(ov, &v.valid, PyBUF_SIMPLE)) {
        release(&v);
        return NULL;
    }
    Py_ssize_t n = v.valid.len;
    if (v.starts.len != n * 8 || v.ends.len != n * 8 || lo < 0 || hi > n || lo > hi) {
        release(&v);
        PyErr_SetString(PyExc_ValueError, "parse_objects: starts and ends are int64, one a row");
        return NULL;
    }
    const int64_t *starts = v.starts.buf, *ends = v.ends.buf;
    const uint8_t *valid = v.valid.buf, *data = v.data.buf;
    int64_t size = v.data.len;
    for (Py_ssize_t i = lo; i < hi; i++) {
        if (valid[i] && (starts[i] < 0 || ends[i] < starts[i] || ends[i] > size)) {
            release(&v);
            PyErr_SetString(PyExc_ValueError, "parse_objects: a value lies outside the data");
            return NULL;
        }
    }
    PyObject *status = PyBytes_FromStringAndSize(NULL, hi - lo);
    if (!status) {
        release(&v);
        return NULL;
    }
    uint8_t *st = (uint8_t *)PyBytes_AS_STRING(status);
    Builder *root = builder_new();
    Scratch s;
    memset(&s, 0, sizeof s);
    s.rows = hi - lo;
    if (root) root->hint = s.rows;
    int r = root && !buf_reserve(&root->valid, (size_t)s.rows) ? B_OK : B_NOMEM;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = lo; i < hi && r == B_OK; i++) {
        uint8_t *row = &st[i - lo];
        if (!valid[i]) {
            *row = ROW_NULL;
            r = append_null(root);
            continue;
        }
        const uint8_t *p = data + starts[i], *end = data + ends[i];
        const uint8_t *q = skip_ws(p, end);
        const uint8_t *after = NULL;
        int isnull = 0;
        if (q < end && *q == '{') {
            after = check_object(q, end, 1);
        } else if (end - q >= 4 && memcmp(q, "null", 4) == 0) {
            after = q + 4;
            isnull = 1;
        }
        if (after) after = skip_ws(after, end);
        if (after != end) {
            *row = ROW_REFUSED;
            r = append_null(root);
            continue;
        }
        if (isnull) {
            *row = ROW_NULL;
            r = append_null(root);
            continue;
        }
        *row = ROW_OBJECT;
        r = build_object(root, &q, end, &s);
    }
    Py_END_ALLOW_THREADS
    free(s.key.p);
    release(&v);
    PyObject *out = NULL;
    if (r == B_NOMEM) {
        PyErr_NoMemory();
    } else if (r == B_GIVEUP) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        PyObject *node = node_of(root);
        if (node) out = PyTuple_Pack(2, status, node);
        Py_XDECREF(node);
    }
    builder_free(root);
    Py_DECREF(status);
    return out;
}

/* wire_heads(data, starts, ends, valid) -> (magic, ids, framed) as bytes: per value its first
 * byte (int16; -1 when null or empty), its schema id (int32, big-endian bytes 1-4; 0 unless
 * framed) and whether it is framed (uint8: >= 5 bytes, magic byte 0).  The numpy path in
 * kqlab.serde.wire.parse_wire is the definition; this is one pass instead of a dozen. */
static PyObject *wire_heads(PyObject *self, PyObject *args) {
    PyObject *od, *os, *oe, *ov;
    Views v;
    memset(&v, 0, sizeof v);
    if (!PyArg_ParseTuple(args, "OOOO", &od, &os, &oe, &ov)) return NULL;
    if (PyObject_GetBuffer(od, &v.data, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(os, &v.starts, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(oe, &v.ends, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(ov, &v.valid, PyBUF_SIMPLE)) {
        release(&v);
        return NULL;
    }
    Py_ssize_t n = v.valid.len;
    if (v.starts.len != n * 8 || v.ends.len != n * 8) {
        release(&v);
        PyErr_SetString(PyExc_ValueError, "wire_heads: starts and ends are int64, one a row");
        return NULL;
    }
    const int64_t *starts = v.starts.buf, *ends = v.ends.buf;
    const uint8_t *valid = v.valid.buf, *data = v.data.buf;
    int64_t size = v.data.len;
    PyObject *m = PyBytes_FromStringAndSize(NULL, n * 2);
    PyObject *ids = PyBytes_FromStringAndSize(NULL, n * 4);
    PyObject *fr = PyBytes_FromStringAndSize(NULL, n);
    if (!m || !ids || !fr) {
        Py_XDECREF(m);
        Py_XDECREF(ids);
        Py_XDECREF(fr);
        release(&v);
        return NULL;
    }
    int16_t *mo = (int16_t *)PyBytes_AS_STRING(m);
    int32_t *io = (int32_t *)PyBytes_AS_STRING(ids);
    uint8_t *fo = (uint8_t *)PyBytes_AS_STRING(fr);
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = starts[i], e = ends[i];
        if (!valid[i] || e <= s) {
            mo[i] = -1;
            io[i] = 0;
            fo[i] = 0;
            continue;
        }
        if (s < 0 || e > size) {
            bad = 1;
            break;
        }
        const uint8_t *p = data + s;
        mo[i] = p[0];
        if (e - s >= 5 && p[0] == 0) {
            fo[i] = 1;
            io[i] = (int32_t)(((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) |
                              ((uint32_t)p[3] << 8) | (uint32_t)p[4]);
        } else {
            fo[i] = 0;
            io[i] = 0;
        }
    }
    Py_END_ALLOW_THREADS
    release(&v);
    if (bad) {
        Py_DECREF(m);
        Py_DECREF(ids);
        Py_DECREF(fr);
        PyErr_SetString(PyExc_ValueError, "wire_heads: a value lies outside the data");
        return NULL;
    }
    return Py_BuildValue("(NNN)", m, ids, fr);
}

static PyMethodDef methods[] = {
    {"wire_heads", wire_heads, METH_VARARGS,
     "wire_heads(data, starts, ends, valid) -> (magic int16, ids int32, framed uint8) bytes: "
     "the Confluent header of every value (see kqlab.serde.wire.parse_wire)."},
    {"parse_objects", parse_objects, METH_VARARGS,
     "parse_objects(data, starts, ends, valid, lo, hi) -> None | (status, node): JSON objects "
     "of rows lo:hi as Arrow column buffers (see kqlab.serde.json_arrow)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kqlab.serde._cjson",
    "JSON objects straight into Arrow column buffers (kqlab.serde.json_arrow's fast path).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__cjson(void) {
    if (PyType_Ready(&OwnedType) < 0) return NULL;
    c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (!c_locale) {
        PyErr_SetString(PyExc_OSError, "newlocale(C) failed");
        return NULL;
    }
    return PyModule_Create(&module);
}
