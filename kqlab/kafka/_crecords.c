/*
 * kqlab.kafka._crecords -- C accelerator for kqlab.kafka._records_py.parse_records and
 * kqlab.kafka._scan_py (scan_batches, crc32c).
 *
 * The pure-Python modules are the specification; this file implements exactly the same walk over
 * the records region of magic v2 batches in the three ReadModes of the broker's readers
 * (DefaultRecord.readFrom over the batch buffer or a record-sized buffer from the stream, and
 * the partial readPartiallyFrom), a region that a failing codec delivered ending in that
 * failure, and returns the 17 fields of ParsedRecords as a tuple.
 * scan_batches walks a buffer batch by batch (log.scan_buffer's rules) and returns the batch
 * headers as columns with each v2 batch's CRC-32C checked; crc32c is exposed on its own.
 *
 * Design notes
 * - Numeric columns are grown with PyMem_Raw* (safe without the GIL) and handed to numpy with
 *   numpy.frombuffer over a tiny owning buffer object (_Buffer), so no numpy C API is needed and
 *   the arrays are writable and zero-copy.
 * - The concatenated data buffers are grown in place inside bytes objects (_PyBytes_Resize), so the
 *   returned bytes need no extra copy.
 * - Capacity never follows a declared count or length: every buffer grows geometrically with
 *   what was actually read, and every read is bounds-checked against the region's end.
 * - The GIL is released while a large region is walked; it is re-taken only to grow a bytes
 *   buffer.  Region buffers are held through the buffer protocol for the whole walk.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#endif

/* ParseErrorKind (kqlab/kafka/_records_py.py) */
enum {
    K_PREMATURE_EOF = 1,
    K_SIZE_EXCEEDS_REMAINING = 2,
    K_SIZE_MISMATCH = 3,
    K_NEGATIVE_HEADER_COUNT = 4,
    K_HEADER_COUNT_EXCEEDS_REMAINING = 5,
    K_NEGATIVE_HEADER_KEY = 6,
    K_INVALID_STRUCTURE = 7,
    K_RECORDS_REMAINING = 8,
    K_INVALID_COUNT = 9,
    K_SKIP_EOF = 10,
    K_LENGTH_TOO_LONG = 11,
    K_PAYLOAD_EOF = 12,
    K_CODEC_READ = 13,
    K_CODEC_TAIL = 14,
    K_BODY_TOO_LARGE = 15,
};

/* ReadMode (kqlab/kafka/_records_py.py) */
enum { M_PARTIAL = 0, M_BUFFER = 1, M_STREAM = 2 };

/* _records_py.BODY_ALLOCATION_LIMIT */
#define BODY_ALLOCATION_LIMIT (1LL << 30)

/* varint results */
enum { V_OK = 0, V_UNDERFLOW = 1, V_TOOLONG = 2 };

/* internal status codes (the Python exception is set once the GIL is held again) */
enum { ST_OK = 0, ST_NOMEM = 1, ST_OVERFLOW = 2, ST_PYERR = 3 };

/* Regions at least this long are walked with the GIL released. */
#define RELEASE_GIL_MIN_BYTES 32768

#define INITIAL_RECORDS 256
#define INITIAL_HEADERS 64
#define INITIAL_DATA 4096

/* ------------------------------------------------------------------------------------------ */
/* varints (Java ByteUtils semantics)                                                          */
/* ------------------------------------------------------------------------------------------ */

static inline int32_t
zigzag32(uint32_t u)
{
    return (int32_t)((u >> 1) ^ (0u - (u & 1u)));
}

static inline int64_t
zigzag64(uint64_t u)
{
    return (int64_t)((u >> 1) ^ (0ull - (u & 1ull)));
}

/* At most 5 bytes; value bits above 32 are dropped (shift of the 5th group is 28).  On V_TOOLONG
   *out holds the raw 32-bit value Java's illegalVarintException prints. */
static int
varint32_slow(const uint8_t *buf, Py_ssize_t *ppos, Py_ssize_t end, int32_t *out)
{
    Py_ssize_t pos = *ppos;
    uint32_t u = 0;
    int i;
    for (i = 0; i < 5; i++) {
        uint32_t b;
        if (pos >= end) {
            return V_UNDERFLOW;
        }
        b = buf[pos++];
        u |= (b & 0x7Fu) << (7 * i);
        if (b < 0x80u) {
            *ppos = pos;
            *out = zigzag32(u);
            return V_OK;
        }
    }
    *out = (int32_t)u;
    return V_TOOLONG;
}

static inline int
rd32(const uint8_t *buf, Py_ssize_t *ppos, Py_ssize_t end, int32_t *out)
{
    Py_ssize_t pos = *ppos;
    if (LIKELY(pos < end)) {
        uint32_t b = buf[pos];
        if (LIKELY(b < 0x80u)) {
            *ppos = pos + 1;
            *out = zigzag32(b);
            return V_OK;
        }
        if (LIKELY(pos + 1 < end)) {
            uint32_t b2 = buf[pos + 1];
            if (b2 < 0x80u) {
                *ppos = pos + 2;
                *out = zigzag32((b & 0x7Fu) | (b2 << 7));
                return V_OK;
            }
        }
    }
    return varint32_slow(buf, ppos, end, out);
}

/* At most 10 bytes; value bits above 64 are dropped (shift of the 10th group is 63). */
static int
varint64_slow(const uint8_t *buf, Py_ssize_t *ppos, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t pos = *ppos;
    uint64_t u = 0;
    int i;
    for (i = 0; i < 10; i++) {
        uint64_t b;
        if (pos >= end) {
            return V_UNDERFLOW;
        }
        b = buf[pos++];
        u |= (b & 0x7Full) << (7 * i);
        if (b < 0x80u) {
            *ppos = pos;
            *out = zigzag64(u);
            return V_OK;
        }
    }
    return V_TOOLONG;
}

static inline int
rd64(const uint8_t *buf, Py_ssize_t *ppos, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t pos = *ppos;
    if (LIKELY(pos < end)) {
        uint64_t b = buf[pos];
        if (LIKELY(b < 0x80u)) {
            *ppos = pos + 1;
            *out = zigzag64(b);
            return V_OK;
        }
    }
    return varint64_slow(buf, ppos, end, out);
}

/* ------------------------------------------------------------------------------------------ */
/* _Buffer: owns PyMem_Raw memory and exports it (writable) so numpy.frombuffer can wrap it    */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t size;
} OwnedBuffer;

static void
OwnedBuffer_dealloc(OwnedBuffer *self)
{
    PyMem_RawFree(self->data);
    self->data = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
OwnedBuffer_getbuffer(OwnedBuffer *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 0, flags);
}

static PyBufferProcs OwnedBuffer_as_buffer = {
    (getbufferproc)OwnedBuffer_getbuffer,
    NULL,
};

static PyTypeObject OwnedBuffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqlab.kafka._crecords._Buffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_itemsize = 0,
    .tp_dealloc = (destructor)OwnedBuffer_dealloc,
    .tp_as_buffer = &OwnedBuffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory owned by a parse_records result column.",
};

static PyObject *np_frombuffer = NULL;
static PyObject *dt_int64 = NULL;
static PyObject *dt_int32 = NULL;
static PyObject *dt_int8 = NULL;

/* Take ownership of `data` (PyMem_Raw, may be NULL) and return numpy.frombuffer over it. */
static PyObject *
wrap_array(void *data, Py_ssize_t nbytes, PyObject *dtype)
{
    OwnedBuffer *ob;
    PyObject *arr;
    void *q = PyMem_RawRealloc(data, nbytes > 0 ? (size_t)nbytes : 1u);
    if (q == NULL) {
        if (data == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        /* shrinking failed: keep the larger block */
    }
    else {
        data = q;
    }
    ob = PyObject_New(OwnedBuffer, &OwnedBuffer_Type);
    if (ob == NULL) {
        PyMem_RawFree(data);
        return NULL;
    }
    ob->data = data;
    ob->size = nbytes;
    arr = PyObject_CallFunctionObjArgs(np_frombuffer, (PyObject *)ob, dtype, NULL);
    Py_DECREF(ob);
    return arr;
}

/* ------------------------------------------------------------------------------------------ */
/* output state                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject *obj; /* a bytes object used as a growable buffer (refcount 1, ours) */
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
} DataBuf;

typedef struct {
    int with_data;
    PyThreadState *tstate; /* non-NULL while the GIL is released */

    /* per-record columns: n used, cap allocated (offset columns have cap + 1) */
    Py_ssize_t n;
    Py_ssize_t cap;
    int64_t *ts;
    int32_t *offd;
    int8_t *attr;
    int32_t *klen;
    int32_t *vlen;
    int32_t *hcnt;
    int32_t *koff;
    int32_t *voff;

    /* per-header columns (with_data only) */
    Py_ssize_t hn;
    Py_ssize_t hcap;
    int32_t *hkoff;
    int32_t *hvoff;
    int32_t *hvlen;

    DataBuf key;
    DataBuf value;
    DataBuf hkey;
    DataBuf hval;
} Out;

typedef struct {
    int kind;
    int64_t a;
    int64_t b;
} BatchErr;

#define RAW_GROW(ptr, count)                                                                  \
    do {                                                                                      \
        void *q_ = PyMem_RawRealloc((ptr), (size_t)(count) * sizeof(*(ptr)));                 \
        if (q_ == NULL) {                                                                     \
            return ST_NOMEM;                                                                  \
        }                                                                                     \
        (ptr) = q_;                                                                           \
    } while (0)

static int
grow_records(Out *o, Py_ssize_t nc)
{
    if (nc > PY_SSIZE_T_MAX / 16) {
        return ST_NOMEM;
    }
    RAW_GROW(o->ts, nc);
    RAW_GROW(o->offd, nc);
    RAW_GROW(o->attr, nc);
    RAW_GROW(o->klen, nc);
    RAW_GROW(o->vlen, nc);
    RAW_GROW(o->hcnt, nc);
    if (o->with_data) {
        RAW_GROW(o->koff, nc + 1);
        RAW_GROW(o->voff, nc + 1);
    }
    o->cap = nc;
    return ST_OK;
}

static int
grow_headers(Out *o, Py_ssize_t nc)
{
    if (nc > PY_SSIZE_T_MAX / 16) {
        return ST_NOMEM;
    }
    RAW_GROW(o->hkoff, nc + 1);
    RAW_GROW(o->hvoff, nc + 1);
    RAW_GROW(o->hvlen, nc);
    o->hcap = nc;
    return ST_OK;
}

/*
 * Ask for transparent huge pages on a large output buffer (Linux, THP in "madvise" mode, the
 * Debian default).  Filling tens of MB of fresh memory otherwise costs one page fault (and a
 * page zeroing) per 4 KiB, which measured more than the copy itself; numpy asks the same for
 * its large arrays.  The advice covers the whole pages around the buffer: for the large
 * blocks malloc maps on their own that is exactly their mapping (no mapping is split, so a
 * later realloc can still mremap it); anywhere else it is harmless advice.
 */
#define HUGEPAGE_MIN_BYTES (4 << 20)

static void
advise_hugepages(void *p, Py_ssize_t n)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    static uintptr_t page = 0;
    uintptr_t lo, hi;
    if (n < HUGEPAGE_MIN_BYTES) {
        return;
    }
    if (page == 0) {
        long ps = sysconf(_SC_PAGESIZE);
        page = ps > 0 ? (uintptr_t)ps : 4096u;
    }
    lo = (uintptr_t)p & ~(page - 1);
    hi = ((uintptr_t)p + (uintptr_t)n + page - 1) & ~(page - 1);
    (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* advice: failure changes nothing */
#else
    (void)p;
    (void)n;
#endif
}

/*
 * Large data buffers are reused.  The last BUFPOOL_SIZE data buffers of at least
 * BUFPOOL_MIN_BYTES a parse handed out (as bytes) stay referenced here; a later parse takes
 * one whose only reference is this one (every reader of a bytes object's memory holds a
 * reference to it: Arrow and numpy through the buffer protocol, slices by copying), so no
 * table or array can see its memory change.  Fresh memory costs a page fault and the kernel
 * zeroing each page: reusing saved ~20 % of the CPU of decoding an uncompressed 52 MB segment
 * and ~9 % of a zstd one (benchmarks/decode.py --quick), a reused buffer's pages being mapped.  The cost: up to
 * BUFPOOL_SIZE such buffers stay allocated after their tables are gone, until a parse takes
 * them or pushes them out (_release_buffers() drops them).  Only used with the GIL held.
 */
#define BUFPOOL_SIZE 2
#define BUFPOOL_MIN_BYTES (4 << 20)
static PyObject *bufpool[BUFPOOL_SIZE];

/* A bytes object of at least `cap` bytes that only the caller references: a free pooled one
 * (the largest) or a new one; NULL with MemoryError set. */
static PyObject *
bufpool_take(Py_ssize_t cap)
{
    int i, best = -1;
    if (cap >= BUFPOOL_MIN_BYTES) {
        for (i = 0; i < BUFPOOL_SIZE; i++) {
            PyObject *b = bufpool[i];
            if (b != NULL && Py_REFCNT(b) == 1 &&
                (best < 0 || Py_SIZE(b) > Py_SIZE(bufpool[best]))) {
                best = i;
            }
        }
    }
    if (best >= 0) {
        PyObject *obj = bufpool[best];
        Py_ssize_t want = Py_SIZE(obj) > cap ? Py_SIZE(obj) : cap;
        bufpool[best] = NULL;
        /* never resized to its own size: a real resize also drops a hash cached on it */
        if (_PyBytes_Resize(&obj, want == Py_SIZE(obj) ? want + 1 : want) == 0) {
            return obj;
        }
        PyErr_Clear(); /* the object is gone: new memory instead */
    }
    return PyBytes_FromStringAndSize(NULL, cap);
}

/* Keep a large buffer just handed out for a later parse (the oldest kept one makes room). */
static void
bufpool_keep(PyObject *obj)
{
    PyObject *old = bufpool[BUFPOOL_SIZE - 1];
    memmove(&bufpool[1], &bufpool[0], (BUFPOOL_SIZE - 1) * sizeof(PyObject *));
    bufpool[0] = Py_NewRef(obj);
    Py_XDECREF(old);
}

static int
databuf_init(DataBuf *d, Py_ssize_t cap)
{
    if (cap < INITIAL_DATA) {
        cap = INITIAL_DATA;
    }
    d->obj = bufpool_take(cap);
    if (d->obj == NULL) {
        return -1;
    }
    d->p = PyBytes_AS_STRING(d->obj);
    d->len = 0;
    d->cap = PyBytes_GET_SIZE(d->obj);
    advise_hugepages(d->p, d->cap);
    return 0;
}

/* Grow d so that it holds at least `need` bytes (needs the GIL: re-takes it if released). */
static int
databuf_grow(Out *o, DataBuf *d, Py_ssize_t need)
{
    Py_ssize_t nc = d->cap > 0 ? d->cap : INITIAL_DATA;
    int r;
    while (nc < need) {
        if (nc > PY_SSIZE_T_MAX / 2) {
            nc = need;
            break;
        }
        nc *= 2;
    }
    if (o->tstate != NULL) {
        PyEval_RestoreThread(o->tstate);
    }
    r = _PyBytes_Resize(&d->obj, nc); /* on failure: d->obj = NULL, MemoryError set */
    if (o->tstate != NULL) {
        o->tstate = PyEval_SaveThread();
    }
    if (r < 0) {
        d->p = NULL;
        d->cap = 0;
        return ST_PYERR;
    }
    d->p = PyBytes_AS_STRING(d->obj);
    d->cap = nc;
    advise_hugepages(d->p, nc);
    return ST_OK;
}

static inline int
databuf_append(Out *o, DataBuf *d, const uint8_t *src, Py_ssize_t n)
{
    if (UNLIKELY(n > d->cap - d->len)) {
        int st = databuf_grow(o, d, d->len + n);
        if (st != ST_OK) {
            return st;
        }
    }
    memcpy(d->p + d->len, src, (size_t)n);
    d->len += n;
    return ST_OK;
}

static void
out_free(Out *o)
{
    PyMem_RawFree(o->ts);
    PyMem_RawFree(o->offd);
    PyMem_RawFree(o->attr);
    PyMem_RawFree(o->klen);
    PyMem_RawFree(o->vlen);
    PyMem_RawFree(o->hcnt);
    PyMem_RawFree(o->koff);
    PyMem_RawFree(o->voff);
    PyMem_RawFree(o->hkoff);
    PyMem_RawFree(o->hvoff);
    PyMem_RawFree(o->hvlen);
    o->ts = NULL;
    o->offd = NULL;
    o->attr = NULL;
    o->klen = o->vlen = o->hcnt = o->koff = o->voff = NULL;
    o->hkoff = o->hvoff = o->hvlen = NULL;
    Py_CLEAR(o->key.obj);
    Py_CLEAR(o->value.obj);
    Py_CLEAR(o->hkey.obj);
    Py_CLEAR(o->hval.obj);
}

/* ------------------------------------------------------------------------------------------ */
/* the walk over one batch's records region                                                    */
/* ------------------------------------------------------------------------------------------ */

/*
 * Parse up to `count` (>= 0) records of buf[0:end] into o, in ReadMode `mode`; `failed` says the
 * region ends where a codec failed.  Structural problems are reported through *err (kind 0 =
 * none) and *n_out; the return value is an ST_* code for fatal problems (memory, int32 offset
 * overflow) that abort the whole call.
 */
static int
parse_batch(Out *o, const uint8_t *buf, Py_ssize_t end, int64_t count, int mode, int failed,
            int64_t *n_out, BatchErr *err)
{
    const int partial = mode == M_PARTIAL;
    const int stream = mode == M_STREAM;
    const int with_data = o->with_data;
    /* running past the end: a varint in the partial reader meets the codec's failure or the end
       of stream (invalid structure); the full readers' fields are bounded by their buffer */
    const int eof_partial = failed ? K_CODEC_READ : K_INVALID_STRUCTURE;
    const int eof_kind = partial ? eof_partial : K_INVALID_STRUCTURE;
    Py_ssize_t pos = 0;
    int64_t n = 0;
    Py_ssize_t save_hn = 0, save_hk = 0, save_hv = 0;
    int st = ST_OK;

    err->kind = 0;
    err->a = 0;
    err->b = 0;

#define FAIL(k, aa, bb)                                                                       \
    do {                                                                                      \
        err->kind = (k);                                                                      \
        err->a = (int64_t)(aa);                                                               \
        err->b = (int64_t)(bb);                                                               \
        goto fail;                                                                            \
    } while (0)

/* step over `len` (>= 0) bytes of a field that must end within `lim` */
#define SKIP(len, lim)                                                                        \
    do {                                                                                      \
        if (UNLIKELY((Py_ssize_t)(len) > (lim) - pos)) {                                      \
            if (!partial) {                                                                   \
                FAIL(K_INVALID_STRUCTURE, 0, 0);                                              \
            }                                                                                 \
            if (failed) {                                                                     \
                FAIL(K_CODEC_READ, 0, 0);                                                     \
            }                                                                                 \
            FAIL(K_SKIP_EOF, (int64_t)pos + (int64_t)(len) - (int64_t)(lim), 0);              \
        }                                                                                     \
        pos += (len);                                                                         \
    } while (0)

/* a varint inside the record body */
#define BODY_VARINT(fn, lim, out)                                                             \
    do {                                                                                      \
        int r_ = fn(buf, &pos, (lim), (out));                                                 \
        if (UNLIKELY(r_ != V_OK)) {                                                           \
            FAIL(r_ == V_UNDERFLOW ? eof_kind : K_INVALID_STRUCTURE, 0, 0);                   \
        }                                                                                     \
    } while (0)

    while (n < count) {
        int32_t size, offd, klen, vlen, hcount;
        int64_t tsd;
        uint8_t attr;
        Py_ssize_t start, kstart, vstart, lim;
        Py_ssize_t i;
        int r;

        /* header entries appended from here on belong to this record (rolled back at fail) */
        save_hn = o->hn;
        save_hk = o->hkey.len;
        save_hv = o->hval.len;

        /* -- length prefix -- */
        r = rd32(buf, &pos, end, &size);
        if (UNLIKELY(r != V_OK)) {
            if (r == V_UNDERFLOW) {
                FAIL(failed ? K_CODEC_READ : K_PREMATURE_EOF, 0, 0);
            }
            if (mode == M_BUFFER) {
                FAIL(K_LENGTH_TOO_LONG, (uint32_t)size, 0);
            }
            FAIL(K_PREMATURE_EOF, 0, 0);
        }
        if (stream) {
            if (size < 0) {
                FAIL(K_PREMATURE_EOF, 0, 0);
            }
            if ((int64_t)size >= BODY_ALLOCATION_LIMIT) {
                FAIL(K_BODY_TOO_LARGE, size, 0);
            }
            if ((int64_t)size > (int64_t)(end - pos)) {
                if (failed) {
                    FAIL(K_CODEC_READ, 0, 0);
                }
                FAIL(K_PAYLOAD_EOF, size, end - pos);
            }
            lim = pos + size;
        }
        else {
            if (!partial && (int64_t)size > (int64_t)(end - pos)) {
                FAIL(K_SIZE_EXCEEDS_REMAINING, size, end - pos);
            }
            lim = end;
        }
        start = pos;

        if (UNLIKELY(pos >= lim)) {
            FAIL(eof_kind, 0, 0);
        }
        attr = buf[pos++];
        BODY_VARINT(rd64, lim, &tsd);
        BODY_VARINT(rd32, lim, &offd);
        BODY_VARINT(rd32, lim, &klen);
        kstart = pos;
        if (klen >= 0) {
            SKIP(klen, lim);
        }
        BODY_VARINT(rd32, lim, &vlen);
        vstart = pos;
        if (vlen >= 0) {
            SKIP(vlen, lim);
        }
        BODY_VARINT(rd32, lim, &hcount);
        if (UNLIKELY(hcount < 0)) {
            FAIL(K_NEGATIVE_HEADER_COUNT, hcount, 0);
        }
        if (!partial && (Py_ssize_t)hcount > lim - pos) {
            FAIL(K_HEADER_COUNT_EXCEEDS_REMAINING, hcount, 0);
        }
        if (hcount > 0) {
            int32_t h;
            /* Every header consumes at least two bytes or fails, so this loop is bounded by the
               region's length whatever hcount says.  With data, header entries are appended
               eagerly and rolled back (at `fail`) if the record turns out to be broken. */
            for (h = 0; h < hcount; h++) {
                int32_t hklen, hvlen;
                Py_ssize_t hkstart, hvstart;
                BODY_VARINT(rd32, lim, &hklen);
                if (UNLIKELY(hklen < 0)) {
                    FAIL(K_NEGATIVE_HEADER_KEY, hklen, 0);
                }
                hkstart = pos;
                SKIP(hklen, lim);
                BODY_VARINT(rd32, lim, &hvlen);
                hvstart = pos;
                if (hvlen >= 0) {
                    SKIP(hvlen, lim);
                }
                if (with_data) {
                    Py_ssize_t hn = o->hn;
                    if (hklen > 0) {
                        st = databuf_append(o, &o->hkey, buf + hkstart, hklen);
                        if (st != ST_OK) {
                            goto fatal;
                        }
                    }
                    if (hvlen > 0) {
                        st = databuf_append(o, &o->hval, buf + hvstart, hvlen);
                        if (st != ST_OK) {
                            goto fatal;
                        }
                    }
                    if (UNLIKELY(hn == o->hcap)) {
                        st = grow_headers(o, o->hcap * 2);
                        if (st != ST_OK) {
                            goto fatal;
                        }
                    }
                    /* values above INT32_MAX are caught at emit (or rolled back) */
                    o->hkoff[hn + 1] = (int32_t)o->hkey.len;
                    o->hvoff[hn + 1] = (int32_t)o->hval.len;
                    o->hvlen[hn] = hvlen >= 0 ? hvlen : -1;
                    o->hn = hn + 1;
                }
            }
        }
        if (!partial && (int64_t)(pos - start) != (int64_t)size) {
            FAIL(K_SIZE_MISMATCH, size, pos - start);
        }

        /* -- the record is whole: emit it -- */
        i = o->n;
        if (UNLIKELY(i == o->cap)) {
            st = grow_records(o, o->cap * 2);
            if (st != ST_OK) {
                goto fatal;
            }
        }
        o->ts[i] = tsd;
        o->offd[i] = offd;
        o->attr[i] = (int8_t)attr;
        o->klen[i] = klen >= 0 ? klen : -1;
        o->vlen[i] = vlen >= 0 ? vlen : -1;
        o->hcnt[i] = hcount;
        if (with_data) {
            if (klen > 0) {
                st = databuf_append(o, &o->key, buf + kstart, klen);
                if (st != ST_OK) {
                    goto fatal;
                }
            }
            if (vlen > 0) {
                st = databuf_append(o, &o->value, buf + vstart, vlen);
                if (st != ST_OK) {
                    goto fatal;
                }
            }
            if (UNLIKELY((o->key.len | o->value.len | o->hkey.len | o->hval.len) >
                         (Py_ssize_t)INT32_MAX)) {
                st = ST_OVERFLOW;
                goto fatal;
            }
            o->koff[i + 1] = (int32_t)o->key.len;
            o->voff[i + 1] = (int32_t)o->value.len;
        }
        o->n = i + 1;
        n++;
    }
    if (pos != end) {
        err->kind = K_RECORDS_REMAINING;
    }
    else if (failed) {
        err->kind = K_CODEC_TAIL;
    }
    *n_out = n;
    return ST_OK;

fail:
    if (with_data) {
        o->hn = save_hn;
        o->hkey.len = save_hk;
        o->hval.len = save_hv;
    }
    *n_out = n;
    return ST_OK;

fatal:
    *n_out = n;
    return st;
#undef FAIL
#undef SKIP
#undef BODY_VARINT
}

/* ------------------------------------------------------------------------------------------ */
/* zstd: the exact reader's own zstd, bound at import                                          */
/* ------------------------------------------------------------------------------------------ */

/*
 * parse_records decompresses zstd batches itself, into one scratch buffer that stays in the
 * cache while its records are copied out, with the GIL released: no bytes object per batch,
 * no second pass over tens of MB of decompressed data.
 *
 * Which zstd: the very one kqlab.kafka.compression's exact reader runs through python-zstandard.
 * That package ships its zstd twice, in the C extension (which hides the symbols) and in the
 * cffi build (zstandard/_cffi*.so, which exports them); records_parser hands _bind_zstd that
 * file's path and the version the C extension reports, and the functions are looked up there
 * only if the versions agree.  Another zstd (the system's libzstd, say) is not used: versions
 * differ on what a damaged frame decodes to (1.5.4 decodes frames 1.5.7 calls corrupt), and the
 * fast path must never decode what the exact reader would not.  Nothing to link at build time;
 * without the cffi build, every zstd batch goes to the exact reader, as other codecs do.
 *
 * The fast path is taken only when the stream decodes whole: zstd frames (standard magic only:
 * legacy and skippable frames are left to the exact reader) back to back, each ending with the
 * stream's last byte or where the next begins, with zstd's default limits (windowLogMax 27,
 * checksums verified), exactly what kqlab.kafka.compression._read_zstd reads as a stream that
 * delivers these bytes and then ends cleanly.  Anything else (a corrupt or truncated frame,
 * trailing garbage) is decided by the exact reader, which models what the broker's zstd-jni
 * stream delivers before it fails.
 */

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#define KQ_HAVE_DLOPEN 1
#endif

#define CODEC_ZSTD 4
#define ZSTD_FRAME_MAGIC 0xFD2FB528u
#define KQ_ZSTD_RESET_SESSION_ONLY 1 /* ZSTD_ResetDirective */
#define KQ_ZSTD_D_WINDOWLOGMAX 100   /* ZSTD_dParameter */
#define KQ_ZSTD_WINDOWLOG_LIMIT_DEFAULT 27
#define ZSTD_SCRATCH_INITIAL (256 * 1024)
#define ZSTD_SCRATCH_MIN_ROOM (128 * 1024) /* ZSTD_DStreamOutSize() */

typedef struct {
    const void *src;
    size_t size;
    size_t pos;
} KqZstdIn; /* ZSTD_inBuffer */

typedef struct {
    void *dst;
    size_t size;
    size_t pos;
} KqZstdOut; /* ZSTD_outBuffer */

static struct {
    int loaded;
    unsigned version;
    void *(*createDCtx)(void);
    size_t (*freeDCtx)(void *);
    size_t (*reset)(void *, int);
    size_t (*setParameter)(void *, int, int);
    size_t (*decompressStream)(void *, KqZstdOut *, KqZstdIn *);
    unsigned (*isError)(size_t);
} zstd_lib;

/* Bind the zstd functions of the shared object at `path` if its version is `expected`. */
static void
zstd_bind(const char *path, unsigned expected)
{
#ifdef KQ_HAVE_DLOPEN
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unsigned (*version)(void);
    if (h == NULL) {
        return;
    }
    version = (unsigned (*)(void))dlsym(h, "ZSTD_versionNumber");
    zstd_lib.createDCtx = (void *(*)(void))dlsym(h, "ZSTD_createDCtx");
    zstd_lib.freeDCtx = (size_t (*)(void *))dlsym(h, "ZSTD_freeDCtx");
    zstd_lib.reset = (size_t (*)(void *, int))dlsym(h, "ZSTD_DCtx_reset");
    zstd_lib.setParameter = (size_t (*)(void *, int, int))dlsym(h, "ZSTD_DCtx_setParameter");
    zstd_lib.decompressStream =
        (size_t (*)(void *, KqZstdOut *, KqZstdIn *))dlsym(h, "ZSTD_decompressStream");
    zstd_lib.isError = (unsigned (*)(size_t))dlsym(h, "ZSTD_isError");
    /* the advanced decompression API (DCtx_reset, setParameter) is stable from 1.4.0 */
    if (version == NULL || zstd_lib.createDCtx == NULL || zstd_lib.freeDCtx == NULL ||
        zstd_lib.reset == NULL || zstd_lib.setParameter == NULL ||
        zstd_lib.decompressStream == NULL || zstd_lib.isError == NULL || version() < 10400 ||
        version() != expected) {
        dlclose(h);
        memset(&zstd_lib, 0, sizeof(zstd_lib));
        return;
    }
    zstd_lib.version = version();
    zstd_lib.loaded = 1; /* the handle stays open for the life of the process */
#endif
}

typedef struct {
    void *dctx;
    uint8_t *p;
    size_t cap;
} ZstdScratch;

static inline uint32_t
frame_magic(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static void
zstd_scratch_free(ZstdScratch *z)
{
    if (z->dctx != NULL) {
        zstd_lib.freeDCtx(z->dctx);
        z->dctx = NULL;
    }
    PyMem_RawFree(z->p);
    z->p = NULL;
    z->cap = 0;
}

/*
 * Decompress src[0:n] (a batch's records stream) into z->p.  Returns 1 and the length in
 * *out_len when the stream is standard zstd frames that all decode whole (see above); 0 when
 * anything else is found (the exact reader decides); ST_NOMEM-like -1 when memory runs out.
 * Needs no GIL.
 */
static int
zstd_fast(ZstdScratch *z, const uint8_t *src, size_t n, size_t *out_len)
{
    size_t pos = 0, olen = 0;
    if (z->dctx == NULL) {
        z->dctx = zstd_lib.createDCtx();
        if (z->dctx == NULL) {
            return -1;
        }
        if (zstd_lib.isError(zstd_lib.setParameter(z->dctx, KQ_ZSTD_D_WINDOWLOGMAX,
                                                   KQ_ZSTD_WINDOWLOG_LIMIT_DEFAULT))) {
            return 0;
        }
    }
    while (pos < n) {
        KqZstdIn in;
        if (n - pos < 4 || frame_magic(src + pos) != ZSTD_FRAME_MAGIC) {
            return 0;
        }
        if (zstd_lib.isError(zstd_lib.reset(z->dctx, KQ_ZSTD_RESET_SESSION_ONLY))) {
            return 0;
        }
        in.src = src;
        in.size = n;
        in.pos = pos;
        for (;;) {
            KqZstdOut out;
            size_t r, in_before;
            if (z->cap - olen < ZSTD_SCRATCH_MIN_ROOM) {
                size_t nc = z->cap ? z->cap : ZSTD_SCRATCH_INITIAL;
                uint8_t *q;
                while (nc - olen < ZSTD_SCRATCH_MIN_ROOM) {
                    if (nc > ((size_t)PY_SSIZE_T_MAX) / 2) {
                        return -1;
                    }
                    nc *= 2;
                }
                q = PyMem_RawRealloc(z->p, nc);
                if (q == NULL) {
                    return -1;
                }
                z->p = q;
                z->cap = nc;
            }
            out.dst = z->p;
            out.size = z->cap;
            out.pos = olen;
            in_before = in.pos;
            r = zstd_lib.decompressStream(z->dctx, &out, &in);
            if (zstd_lib.isError(r)) {
                return 0;
            }
            if (r == 0) {
                olen = out.pos;
                break; /* the frame is decoded and flushed; in.pos is just past it */
            }
            if (out.pos < out.size && in.pos == in.size) {
                return 0; /* the input ends inside the frame: truncated */
            }
            if (out.pos == olen && in.pos == in_before && out.pos < out.size) {
                return 0; /* no progress: never expected, never looped on */
            }
            olen = out.pos;
        }
        pos = in.pos;
    }
    *out_len = olen;
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* lz4: Kafka's Lz4BlockInputStream walk over the exact reader's own LZ4 block decoder          */
/* ------------------------------------------------------------------------------------------ */

/*
 * The same idea as zstd above, for LZ4: the block decoder is LZ4_decompress_safe of the
 * python-lz4 block module (lz4/block/_block*.so exports it), the function the exact reader's
 * lz4.block.decompress calls; the frame is walked here exactly as
 * kqlab.kafka.compression._unlz4 walks it (Kafka's Lz4BlockInputStream: the FLG/BD rules, the
 * header checksum, block sizes up to the frame's maximum, stored blocks, block checksums, the
 * end mark and the content checksum's four bytes, which are never verified, nothing read after
 * them).  Any failure of that walk -- which the exact reader turns into what the broker's
 * stream delivers before it throws -- declines the fast path.
 */

#define CODEC_LZ4 3
#define LZ4_FRAME_MAGIC 0x184D2204u

static struct {
    int loaded;
    int version;
    int (*decompress_safe)(const char *, char *, int, int);
} lz4_lib;

/* Bind LZ4_decompress_safe of the shared object at `path` if its version is `expected`. */
static void
lz4_bind(const char *path, int expected)
{
#ifdef KQ_HAVE_DLOPEN
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    int (*version)(void);
    if (h == NULL) {
        return;
    }
    version = (int (*)(void))dlsym(h, "LZ4_versionNumber");
    lz4_lib.decompress_safe =
        (int (*)(const char *, char *, int, int))dlsym(h, "LZ4_decompress_safe");
    if (version == NULL || lz4_lib.decompress_safe == NULL || version() != expected) {
        dlclose(h);
        memset(&lz4_lib, 0, sizeof(lz4_lib));
        return;
    }
    lz4_lib.version = version();
    lz4_lib.loaded = 1;
#endif
}

/* XXH32 (the frame's header and block checksums) */
#define XXH_P1 2654435761u
#define XXH_P2 2246822519u
#define XXH_P3 3266489917u
#define XXH_P4 668265263u
#define XXH_P5 374761393u

static inline uint32_t
xxh_rotl(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

static inline uint32_t
xxh_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static uint32_t
xxh32(const uint8_t *p, size_t n, uint32_t seed)
{
    const uint8_t *const end = p + n;
    uint32_t h;
    if (n >= 16) {
        const uint8_t *const limit = end - 16;
        uint32_t v1 = seed + XXH_P1 + XXH_P2, v2 = seed + XXH_P2, v3 = seed, v4 = seed - XXH_P1;
        do {
            v1 = xxh_rotl(v1 + xxh_le32(p) * XXH_P2, 13) * XXH_P1;
            v2 = xxh_rotl(v2 + xxh_le32(p + 4) * XXH_P2, 13) * XXH_P1;
            v3 = xxh_rotl(v3 + xxh_le32(p + 8) * XXH_P2, 13) * XXH_P1;
            v4 = xxh_rotl(v4 + xxh_le32(p + 12) * XXH_P2, 13) * XXH_P1;
            p += 16;
        } while (p <= limit);
        h = xxh_rotl(v1, 1) + xxh_rotl(v2, 7) + xxh_rotl(v3, 12) + xxh_rotl(v4, 18);
    }
    else {
        h = seed + XXH_P5;
    }
    h += (uint32_t)n;
    while (p + 4 <= end) {
        h = xxh_rotl(h + xxh_le32(p) * XXH_P3, 17) * XXH_P4;
        p += 4;
    }
    while (p < end) {
        h = xxh_rotl(h + (uint32_t)(*p) * XXH_P5, 11) * XXH_P1;
        p++;
    }
    h ^= h >> 15;
    h *= XXH_P2;
    h ^= h >> 13;
    h *= XXH_P3;
    h ^= h >> 16;
    return h;
}

/* Room for `more` bytes after `olen` in the scratch buffer (no GIL needed). */
static int
scratch_room(ZstdScratch *z, size_t olen, size_t more)
{
    size_t nc;
    uint8_t *q;
    if (z->cap - olen >= more) {
        return 0;
    }
    nc = z->cap ? z->cap : ZSTD_SCRATCH_INITIAL;
    while (nc - olen < more) {
        if (nc > ((size_t)PY_SSIZE_T_MAX) / 2) {
            return -1;
        }
        nc *= 2;
    }
    q = PyMem_RawRealloc(z->p, nc);
    if (q == NULL) {
        return -1;
    }
    z->p = q;
    z->cap = nc;
    return 0;
}

/*
 * Decode src[0:n] as Kafka's Lz4BlockInputStream reads a magic v2 batch's stream into z->p:
 * 1 (and the length) when the walk ends at the end mark without a failure, 0 when the exact
 * reader must decide, -1 when memory runs out.  Needs no GIL.
 */
static int
lz4_fast(ZstdScratch *z, const uint8_t *src, size_t n, size_t *out_len)
{
    size_t pos, olen = 0, max_block;
    uint8_t flg, bd;
    int size_value;
    if (n < 6 || xxh_le32(src) != LZ4_FRAME_MAGIC) {
        return 0;
    }
    flg = src[4];
    bd = src[5];
    if ((flg & 0x03) || !(flg & 0x20) || (flg >> 6) != 1 || (bd & 0x0F) || (bd & 0x80)) {
        return 0;
    }
    size_value = (bd >> 4) & 7;
    if (size_value < 4) {
        return 0;
    }
    max_block = (size_t)1 << (2 * size_value + 8);
    pos = 6;
    if (flg & 0x08) { /* content size: skipped, never compared */
        if (n - pos < 8) {
            return 0;
        }
        pos += 8;
    }
    if (pos >= n || src[pos] != ((xxh32(src + 4, pos - 4, 0) >> 8) & 0xFF)) {
        return 0;
    }
    pos++;
    for (;;) {
        uint32_t word, bn;
        if (n - pos < 4) {
            return 0;
        }
        word = xxh_le32(src + pos);
        pos += 4;
        bn = word & 0x7FFFFFFFu;
        if (bn == 0) {
            if ((flg & 0x04) && n - pos < 4) { /* the (unverified) content checksum */
                return 0;
            }
            break;
        }
        if (bn > max_block || n - pos < bn) {
            return 0;
        }
        if (word & 0x80000000u) { /* stored */
            if (scratch_room(z, olen, bn) < 0) {
                return -1;
            }
            memcpy(z->p + olen, src + pos, bn);
            olen += bn;
        }
        else {
            int got;
            if (scratch_room(z, olen, max_block) < 0) {
                return -1;
            }
            got = lz4_lib.decompress_safe((const char *)src + pos, (char *)z->p + olen, (int)bn,
                                          (int)max_block);
            if (got < 0) {
                return 0;
            }
            olen += (size_t)got;
        }
        if (flg & 0x10) { /* block checksum */
            if (n - pos - bn < 4 || xxh32(src + pos, bn, 0) != xxh_le32(src + pos + bn)) {
                return 0;
            }
            pos += 4;
        }
        pos += bn;
    }
    *out_len = olen;
    return 1;
}

/* The codecs the parser decompresses itself (their library is loaded). */
static inline int
fast_codec(int codec)
{
    return (codec == CODEC_ZSTD && zstd_lib.loaded) || (codec == CODEC_LZ4 && lz4_lib.loaded);
}

/* The fast path of either codec: 1 decoded whole into z->p[0:*len], 0 declined, -1 no memory. */
static int
fast_unpack(ZstdScratch *z, int codec, const uint8_t *src, size_t n, size_t *out_len)
{
    if (codec == CODEC_ZSTD && zstd_lib.loaded) {
        return zstd_fast(z, src, n, out_len);
    }
    if (codec == CODEC_LZ4 && lz4_lib.loaded) {
        return lz4_fast(z, src, n, out_len);
    }
    return 0;
}

PyDoc_STRVAR(bind_doc,
"_bind(codec, path, version) -> int | None\n"
"\n"
"Decompress codec 3 (lz4) or 4 (zstd) in the parser with the library in the shared object at\n"
"path (python-lz4's block module, python-zstandard's cffi build), if it reports `version`\n"
"(what the exact reader's library reports).  Returns the bound version (also when the codec\n"
"was bound before), or None.  Called once, by kqlab.kafka.records_parser at import.");

static PyObject *
py_bind(PyObject *Py_UNUSED(module), PyObject *args)
{
    int codec;
    const char *path;
    long long version;
    if (!PyArg_ParseTuple(args, "isL:_bind", &codec, &path, &version)) {
        return NULL;
    }
    if (codec == CODEC_ZSTD) {
        if (!zstd_lib.loaded && version > 0 && version <= UINT32_MAX) {
            zstd_bind(path, (unsigned)version);
        }
        if (zstd_lib.loaded) {
            return PyLong_FromUnsignedLong(zstd_lib.version);
        }
    }
    else if (codec == CODEC_LZ4) {
        if (!lz4_lib.loaded && version > 0 && version <= INT32_MAX) {
            lz4_bind(path, (int)version);
        }
        if (lz4_lib.loaded) {
            return PyLong_FromLong(lz4_lib.version);
        }
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(unpack_doc,
"_unpack(codec, data) -> bytes | None\n"
"\n"
"The bytes the parser's fast path decodes from a records stream of codec 3 (lz4) or 4 (zstd),\n"
"or None when it leaves the stream to the exact reader (or the codec's library is not\n"
"loaded).  For tests: whenever this returns bytes, kqlab.kafka.compression.read_stream must\n"
"deliver the same bytes and no failure.");

static int get_bytes_view(PyObject *obj, Py_buffer *view, PyObject **copy);

static PyObject *
py_unpack(PyObject *Py_UNUSED(module), PyObject *args)
{
    ZstdScratch zs = {NULL, NULL, 0};
    Py_buffer view;
    PyObject *obj, *copy, *result;
    size_t len = 0;
    int codec, r;
    if (!PyArg_ParseTuple(args, "iO:_unpack", &codec, &obj)) {
        return NULL;
    }
    if (!fast_codec(codec)) {
        Py_RETURN_NONE;
    }
    if (get_bytes_view(obj, &view, &copy) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    r = fast_unpack(&zs, codec, (const uint8_t *)view.buf, (size_t)view.len, &len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_XDECREF(copy);
    if (r < 0) {
        zstd_scratch_free(&zs);
        return PyErr_NoMemory();
    }
    result = r == 1 ? PyBytes_FromStringAndSize((const char *)zs.p, (Py_ssize_t)len)
                    : Py_NewRef(Py_None);
    zstd_scratch_free(&zs);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* parse_records                                                                               */
/* ------------------------------------------------------------------------------------------ */

static PyObject *
finish_databuf(DataBuf *d)
{
    PyObject *obj = d->obj;
    d->obj = NULL;
    if (_PyBytes_Resize(&obj, d->len) < 0) {
        return NULL;
    }
    if (d->len >= BUFPOOL_MIN_BYTES) {
        bufpool_keep(obj);
    }
    return obj;
}

/* ------------------------------------------------------------------------------------------ */
/* parse_records and RecordsParser: one parse, fed in one call or piece by piece               */
/* ------------------------------------------------------------------------------------------ */

static uint32_t crc32c_value(const uint8_t *p, size_t len);

#define SCAN_V2_HEADER_SIZE 61 /* the v2 batch header; the records start after it */
#define SCAN_V2_CRC_OFFSET 21  /* the CRC covers [21, size) */

/*
 * One parse: the output columns and, per batch so far, the records read and the error.  Errors
 * are kept as numbers (no Python object per batch) so whole runs of batches are parsed without
 * the GIL; the list of tuples is built once, by ps_finish.
 */
typedef struct {
    Out o;
    int started;
    Py_ssize_t nb;     /* batches so far */
    Py_ssize_t nb_cap; /* entries allocated in batch_n and errs */
    int64_t *batch_n;
    BatchErr *errs;
    PyObject *huge; /* [(batch, count)] for counts below -2**63 (INVALID_COUNT quotes them) */
    ZstdScratch zs;
} ParseState;

static void
ps_free(ParseState *ps)
{
    out_free(&ps->o);
    PyMem_RawFree(ps->batch_n);
    PyMem_RawFree(ps->errs);
    ps->batch_n = NULL;
    ps->errs = NULL;
    Py_CLEAR(ps->huge);
    zstd_scratch_free(&ps->zs);
    ps->started = 0;
    ps->nb = ps->nb_cap = 0;
}

/* Allocate the output; `reserve` is the value buffer's first capacity (bytes that exist). */
static int
ps_start(ParseState *ps, int with_data, Py_ssize_t reserve)
{
    Out *o = &ps->o;
    o->with_data = with_data;
    if (grow_records(o, INITIAL_RECORDS) != ST_OK) {
        PyErr_NoMemory();
        return -1;
    }
    if (with_data) {
        if (grow_headers(o, INITIAL_HEADERS) != ST_OK) {
            PyErr_NoMemory();
            return -1;
        }
        o->koff[0] = o->voff[0] = o->hkoff[0] = o->hvoff[0] = 0;
        if (reserve > (Py_ssize_t)INT32_MAX) {
            reserve = (Py_ssize_t)INT32_MAX;
        }
        if (databuf_init(&o->key, 0) < 0 || databuf_init(&o->value, reserve) < 0 ||
            databuf_init(&o->hkey, 0) < 0 || databuf_init(&o->hval, 0) < 0) {
            return -1;
        }
    }
    ps->started = 1;
    return 0;
}

/* Room for `more` batch entries (needs no GIL). */
static int
ps_reserve_batches(ParseState *ps, Py_ssize_t more)
{
    Py_ssize_t nc = ps->nb_cap > 0 ? ps->nb_cap : 64;
    void *q;
    if (more <= ps->nb_cap - ps->nb) {
        return ST_OK;
    }
    while (nc - ps->nb < more) {
        if (nc > PY_SSIZE_T_MAX / 64) {
            return ST_NOMEM;
        }
        nc *= 2;
    }
    q = PyMem_RawRealloc(ps->batch_n, (size_t)nc * sizeof(int64_t));
    if (q == NULL) {
        return ST_NOMEM;
    }
    ps->batch_n = q;
    q = PyMem_RawRealloc(ps->errs, (size_t)nc * sizeof(BatchErr));
    if (q == NULL) {
        return ST_NOMEM;
    }
    ps->errs = q;
    ps->nb_cap = nc;
    return ST_OK;
}

/* Turn a fatal ST_* status into the Python exception (ST_PYERR: already set). */
static void
set_status_error(int st)
{
    if (st == ST_NOMEM) {
        PyErr_NoMemory();
    }
    else if (st == ST_OVERFLOW) {
        PyErr_SetString(PyExc_OverflowError,
                        "parse_records: a concatenated key/value/header data buffer would "
                        "exceed 2**31-1 bytes (int32 offsets); parse fewer batches per call");
    }
}

/* GIL helpers over o.tstate, which databuf_grow also uses */
static inline void
ps_release(ParseState *ps)
{
    if (ps->o.tstate == NULL) {
        ps->o.tstate = PyEval_SaveThread();
    }
}

static inline void
ps_acquire(ParseState *ps)
{
    if (ps->o.tstate != NULL) {
        PyEval_RestoreThread(ps->o.tstate);
        ps->o.tstate = NULL;
    }
}

/*
 * Decompress a zstd region with the fast path (no GIL needed).  1: the records are in
 * ps->zs.p[0:*len]; 0: the exact reader must read it; ST_NOMEM-like -1: out of memory.
 */
static inline int
ps_unpack(ParseState *ps, int codec, const uint8_t *buf, Py_ssize_t len, size_t *out_len)
{
    return fast_unpack(&ps->zs, codec, buf, (size_t)len, out_len);
}

/* ps_batch's `fast`: try the zstd fast path here / buf is already its output / it declined */
enum { FAST_TRY = -1, FAST_DECLINED = 0, FAST_DONE = 1 };

/*
 * Parse one batch (batch_n/errs slot ps->nb must exist) whose bytes are buf[0:len] as given
 * (codec 0) or as the fast path or read(index) delivers them (a compressed stream; `fast` says
 * whether the fast path is still to be tried, has decoded buf[0:len] already, or declined).
 * Called with the GIL held or not (ps->o.tstate); takes it only when read must run.  Returns
 * ST_OK, ST_NOMEM/ST_OVERFLOW, or ST_PYERR with the exception set (and the GIL held).
 */
static int
ps_batch(ParseState *ps, const uint8_t *buf, Py_ssize_t len, int codec, int mode, int fail,
         long long count, PyObject *read, Py_ssize_t index, int fast)
{
    PyObject *delivered = NULL;
    Py_buffer dview;
    int have_dview = 0;
    BatchErr *err = &ps->errs[ps->nb];
    int64_t n = 0;
    int st = ST_OK;

    if (codec != 0) {
        /* a compressed stream, opened before the count is looked at (wrapForInput) */
        size_t ulen = 0;
        int r = fast;
        if (fast == FAST_TRY) {
            r = ps_unpack(ps, codec, buf, len, &ulen);
            if (r < 0) {
                return ST_NOMEM;
            }
            if (r == 1) {
                buf = ps->zs.p;
                len = (Py_ssize_t)ulen;
            }
        }
        if (r == 1) {
            fail = 0;
        }
        else {
            PyObject *got;
            ps_acquire(ps);
            got = PyObject_CallFunction(read, "n", index);
            if (got == NULL) {
                return ST_PYERR;
            }
            if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
                Py_DECREF(got);
                PyErr_SetString(PyExc_TypeError,
                                "parse_records: read(i) must return (data, failed)");
                return ST_PYERR;
            }
            fail = PyObject_IsTrue(PyTuple_GET_ITEM(got, 1));
            delivered = Py_NewRef(PyTuple_GET_ITEM(got, 0));
            Py_DECREF(got);
            if (fail < 0 || PyObject_GetBuffer(delivered, &dview, PyBUF_SIMPLE) < 0) {
                Py_DECREF(delivered);
                return ST_PYERR;
            }
            have_dview = 1;
            buf = (const uint8_t *)dview.buf;
            len = dview.len;
        }
    }
    if (count < 0) {
        err->kind = K_INVALID_COUNT;
        err->a = count;
        err->b = 0;
    }
    else {
        if (len >= RELEASE_GIL_MIN_BYTES) {
            ps_release(ps);
        }
        st = parse_batch(&ps->o, buf, len, count, mode, fail, &n, err);
    }
    if (have_dview || delivered != NULL) {
        ps_acquire(ps);
        if (have_dview) {
            PyBuffer_Release(&dview);
        }
        Py_XDECREF(delivered);
    }
    if (st == ST_OK) {
        ps->batch_n[ps->nb++] = n;
    }
    return st;
}

/* Per-region flags of an `add`: a single int or one entry per region. */
static int
byte_flags(PyObject *obj, Py_ssize_t nb, int truth, const char *what, unsigned char *out)
{
    PyObject *seq = PySequence_Fast(obj, what);
    Py_ssize_t i;
    if (seq == NULL) {
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(seq) != nb) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s must have one entry per region", what);
        return -1;
    }
    for (i = 0; i < nb; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (truth) {
            int t = PyObject_IsTrue(item);
            if (t < 0) {
                Py_DECREF(seq);
                return -1;
            }
            out[i] = (unsigned char)t;
        }
        else {
            long v = PyLong_AsLong(item);
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return -1;
            }
            out[i] = (unsigned char)(v < 0 || v > 254 ? 255 : v);
        }
    }
    Py_DECREF(seq);
    return 0;
}

/*
 * Parse the regions of one `add` (see kqlab.kafka._records_py.parse_records for the
 * arguments); starts the parse on first use with the regions' total bytes as value reserve.
 * Returns 0, or -1 with an exception set.
 */
static int
ps_add(ParseState *ps, int with_data, PyObject *regions_in, PyObject *counts_in,
       PyObject *modes_in, PyObject *failed_in, PyObject *codecs_in, PyObject *read)
{
    PyObject *regions = NULL, *counts = NULL;
    unsigned char *modes = NULL, *failed = NULL, *codecs = NULL;
    int one_mode = M_BUFFER;
    Py_ssize_t nb, bi;
    int rc = -1;

    if (modes_in != NULL && modes_in != Py_None && PyIndex_Check(modes_in)) {
        long m = PyLong_AsLong(modes_in); /* a bool is an int: True BUFFER, False PARTIAL */
        if (m == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (m < M_PARTIAL || m > M_STREAM) {
            PyErr_SetString(PyExc_ValueError, "parse_records: a mode is 0, 1 or 2");
            return -1;
        }
        one_mode = (int)m;
        modes_in = NULL;
    }
    else if (modes_in == Py_None) {
        modes_in = NULL;
    }
    /* private copies: nothing else can mutate them while we work */
    regions = PySequence_List(regions_in);
    if (regions == NULL) {
        goto done;
    }
    counts = PySequence_List(counts_in);
    if (counts == NULL) {
        goto done;
    }
    nb = PyList_GET_SIZE(regions);
    if (nb != PyList_GET_SIZE(counts)) {
        PyErr_SetString(PyExc_ValueError, "regions and counts must have the same length");
        goto done;
    }
    /* counts -> exact ints up front, so no Python code runs while buffers are held */
    for (bi = 0; bi < nb; bi++) {
        PyObject *idx = PyNumber_Index(PyList_GET_ITEM(counts, bi));
        if (idx == NULL) {
            goto done;
        }
        if (PyList_SetItem(counts, bi, idx) < 0) { /* steals idx */
            goto done;
        }
    }
    modes = PyMem_RawMalloc(nb > 0 ? (size_t)nb : 1u);
    failed = PyMem_RawCalloc(nb > 0 ? (size_t)nb : 1u, 1);
    codecs = PyMem_RawCalloc(nb > 0 ? (size_t)nb : 1u, 1);
    if (modes == NULL || failed == NULL || codecs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (modes_in == NULL) {
        memset(modes, one_mode, nb > 0 ? (size_t)nb : 1u);
    }
    else {
        if (byte_flags(modes_in, nb, 0, "modes", modes) < 0) {
            goto done;
        }
        for (bi = 0; bi < nb; bi++) {
            if (modes[bi] > M_STREAM) {
                PyErr_SetString(PyExc_ValueError, "parse_records: a mode is 0, 1 or 2");
                goto done;
            }
        }
    }
    if (failed_in != NULL && failed_in != Py_None &&
        byte_flags(failed_in, nb, 1, "failed", failed) < 0) {
        goto done;
    }
    if (codecs_in != NULL && codecs_in != Py_None) {
        if (byte_flags(codecs_in, nb, 0, "codecs", codecs) < 0) {
            goto done;
        }
        if (read == NULL || read == Py_None) {
            PyErr_SetString(PyExc_ValueError, "codecs need a read function");
            goto done;
        }
    }

    if (!ps->started) {
        /* The values of a region are at most its bytes: reserving the regions' total up
           front lets the value buffer be filled without growing (values are most of the
           data; keys and headers grow geometrically from a page). */
        Py_ssize_t total = 0;
        if (with_data) {
            for (bi = 0; bi < nb; bi++) {
                Py_buffer view;
                if (PyObject_GetBuffer(PyList_GET_ITEM(regions, bi), &view, PyBUF_SIMPLE) < 0) {
                    goto done;
                }
                total = view.len < (Py_ssize_t)INT32_MAX - total ? total + view.len
                                                                 : (Py_ssize_t)INT32_MAX;
                PyBuffer_Release(&view);
            }
        }
        if (ps_start(ps, with_data, total) < 0) {
            goto done;
        }
    }
    if (ps_reserve_batches(ps, nb) != ST_OK) {
        PyErr_NoMemory();
        goto done;
    }

    for (bi = 0; bi < nb; bi++) {
        PyObject *count_obj = PyList_GET_ITEM(counts, bi);
        int overflow = 0;
        long long count = PyLong_AsLongLongAndOverflow(count_obj, &overflow);
        Py_buffer view;
        int st;

        if (count == -1 && overflow == 0 && PyErr_Occurred()) {
            goto done;
        }
        if (overflow < 0) {
            /* below -2**63: INVALID_COUNT quotes the Python int itself (patched at finish) */
            PyObject *pair;
            if (ps->huge == NULL && (ps->huge = PyList_New(0)) == NULL) {
                goto done;
            }
            pair = Py_BuildValue("(nO)", ps->nb, count_obj);
            if (pair == NULL || PyList_Append(ps->huge, pair) < 0) {
                Py_XDECREF(pair);
                goto done;
            }
            Py_DECREF(pair);
            count = -1;
        }
        else if (overflow > 0) {
            count = INT64_MAX; /* unreachable anyway: every record takes at least one byte */
        }
        if (PyObject_GetBuffer(PyList_GET_ITEM(regions, bi), &view, PyBUF_SIMPLE) < 0) {
            goto done;
        }
        st = ps_batch(ps, (const uint8_t *)view.buf, view.len, codecs[bi], modes[bi],
                      failed[bi], count, read, bi, FAST_TRY);
        ps_acquire(ps);
        PyBuffer_Release(&view);
        if (st != ST_OK) {
            set_status_error(st);
            goto done;
        }
    }
    rc = 0;

done:
    PyMem_RawFree(modes);
    PyMem_RawFree(failed);
    PyMem_RawFree(codecs);
    Py_XDECREF(regions);
    Py_XDECREF(counts);
    return rc;
}

/*
 * Parallel decompression for add_batches.  Helper threads (plain C: no Python, no GIL)
 * decompress the run's zstd / lz4 batches ahead of the parse into a ring of slots (each slot
 * an output buffer kept for the run, each thread its own decompression context); the thread
 * that parses takes the batches in log order, so records are appended exactly as the
 * sequential path appends them, and the tables do not depend on who decompressed what.
 *
 * Who decompresses a batch is decided by claiming its ordinal (`next`, in log order, under
 * the pool's lock): a helper claims the next one whenever its slot in the ring is free; the
 * parsing thread, arriving at ordinal j,
 * - parses the slot if j is decompressed;
 * - claims j itself when nobody has (the helpers are behind, or not running at all);
 * - while a helper is still at j, claims and decompresses the next unclaimed batch into its
 *   slot (so it never idles while there is work: on two cores it decompresses about the share
 *   that the parse leaves it time for, which balances the two threads by itself), and waits
 *   for j only when the ring is full;
 * - waits by spinning, at most about twice as long as decompressing j takes (POOL_WAIT_*),
 *   never by sleeping: a running helper finishes within microseconds, and on a busy machine a
 *   thread that sleeps gives its core away and then waits for one again; a helper still at j
 *   after that is not running, so j is decompressed again on the parsing thread and the
 *   helper's late result is dropped.
 * Every decompression is the same fast path into a private buffer, so the bytes parsed are the
 * same whichever thread produced them; a slot says what the fast path found, and a declined
 * stream still goes to the caller's exact reader, on the parsing thread.
 */
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <time.h>
#define KQ_HAVE_THREADS 1
#endif

/* the zstd batches of a run needed before helper threads are started (else: sequential) */
#define POOL_MIN_BATCHES 16
#define POOL_MAX_HELPERS 15
/* ring slots per thread: enough that the parsing thread rarely finds none to help with, few
 * enough that a slot is still in a cache when it is parsed */
#define POOL_SLOTS_PER_THREAD 4
/* how long the parsing thread spins for a batch a helper is decompressing before it
 * decompresses the batch itself: about twice what decompressing it takes (zstd here: ~1 ns per
 * decompressed byte, ~4 ns per compressed byte of JSON-like text) */
#define POOL_WAIT_BASE_NS 10000LL
#define POOL_WAIT_NS_PER_BYTE 10LL
/* the values in force (set with the GIL held, read by pool_start with the GIL held; tests
 * change them with _pool_tuning to make the parsing thread overtake its helpers) */
static long long pool_wait_base_ns = POOL_WAIT_BASE_NS;
static long long pool_wait_ns_per_byte = POOL_WAIT_NS_PER_BYTE;
static int pool_slots_per_thread = POOL_SLOTS_PER_THREAD;
static long long pool_helper_delay_ns = 0; /* tests: a helper sleeps this long per batch */

enum { SLOT_FREE = 0, SLOT_BUSY = 1, SLOT_READY = 2 };

typedef struct {
    uint8_t *p; /* the slot's output buffer (grown as needed, kept for the run) */
    size_t cap;
    size_t len;
    int result; /* fast_unpack's: 1 whole, 0 declined, -1 out of memory */
    int state;
    int abandoned; /* the parse went past it: free the slot when done, drop the result */
    Py_ssize_t j;  /* the ordinal it holds */
} Slot;

#ifdef KQ_HAVE_THREADS
typedef struct {
    const uint8_t *buf;
    const int64_t *pos;
    const int64_t *size;
    const Py_ssize_t *zk; /* batch index of each pooled batch, in order */
    const int32_t *codec;
    Py_ssize_t nz;
    Slot *slots;
    int nslots;
    Py_ssize_t next; /* the next ordinal to claim */
    int stop;
    long long wait_base_ns; /* pool_take's bound on waiting for a helper */
    long long wait_ns_per_byte;
    long long helper_delay_ns;
    int nfree;           /* FREE slots */
    int helpers_waiting; /* helpers waiting for a free slot */
    pthread_mutex_t mu;
    pthread_cond_t freed; /* a slot became FREE (or stop): helpers wait on it */
    pthread_t threads[POOL_MAX_HELPERS];
    int nthreads;
} Pool;

/* Claim ordinal j into `slot` (the lock is held; the slot is FREE). */
static inline void
pool_claim(Pool *pl, Slot *slot, Py_ssize_t j)
{
    pl->next = j + 1;
    slot->state = SLOT_BUSY;
    slot->j = j;
    pl->nfree--;
}

/*
 * A slot became FREE (the lock is held).  Waiting helpers are woken once half the ring is
 * free, not at every slot: on a machine whose cores are all busy a helper shares one with the
 * parsing thread, and a wake per freed slot measured 1.7 context switches per batch (0.55 so).
 */
static inline void
pool_freed(Pool *pl, Slot *slot)
{
    slot->state = SLOT_FREE;
    pl->nfree++;
    if (pl->helpers_waiting && 2 * pl->nfree >= pl->nslots) {
        pthread_cond_broadcast(&pl->freed);
    }
}

/*
 * Decompress ordinal j into `slot` with the calling thread's context *dctx (the lock is not
 * held), then publish the result under the lock.
 */
static void
pool_decompress(Pool *pl, Slot *slot, Py_ssize_t j, void **dctx)
{
    Py_ssize_t k = pl->zk[j];
    const uint8_t *b = pl->buf + pl->pos[k] + SCAN_V2_HEADER_SIZE;
    size_t n = (size_t)(pl->size[k] - SCAN_V2_HEADER_SIZE);
    size_t len = 0;
    ZstdScratch z;
    int r;
    z.dctx = *dctx;
    z.p = slot->p;
    z.cap = slot->cap;
    r = fast_unpack(&z, (int)pl->codec[k], b, n, &len);
    *dctx = z.dctx;
    pthread_mutex_lock(&pl->mu);
    slot->p = z.p; /* the buffer may have moved, also when the fast path declined */
    slot->cap = z.cap;
    if (slot->abandoned) {
        slot->abandoned = 0;
        pool_freed(pl, slot);
    }
    else {
        slot->len = len;
        slot->result = r;
        slot->state = SLOT_READY;
    }
    pthread_mutex_unlock(&pl->mu);
}

static void *
pool_helper(void *arg)
{
    Pool *pl = (Pool *)arg;
    void *dctx = NULL;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        Py_ssize_t j = pl->next;
        Slot *slot;
        if (pl->stop || j >= pl->nz) {
            break;
        }
        slot = &pl->slots[j % pl->nslots];
        if (slot->state != SLOT_FREE) { /* still holds ordinal j - nslots: wait for the parse */
            pl->helpers_waiting++;
            pthread_cond_wait(&pl->freed, &pl->mu);
            pl->helpers_waiting--;
            continue;
        }
        pool_claim(pl, slot, j);
        pthread_mutex_unlock(&pl->mu);
        if (pl->helper_delay_ns > 0) { /* a helper that is not running (tests) */
            struct timespec d;
            d.tv_sec = (time_t)(pl->helper_delay_ns / 1000000000LL);
            d.tv_nsec = (long)(pl->helper_delay_ns % 1000000000LL);
            nanosleep(&d, NULL);
        }
        pool_decompress(pl, slot, j, &dctx);
        pthread_mutex_lock(&pl->mu);
    }
    pthread_mutex_unlock(&pl->mu);
    if (dctx != NULL) {
        zstd_lib.freeDCtx(dctx);
    }
    return NULL;
}

/* Start up to `helpers` threads over the run; 0 when none could be started. */
static int
pool_start(Pool *pl, int helpers)
{
    int i;
    if (helpers > POOL_MAX_HELPERS) {
        helpers = POOL_MAX_HELPERS;
    }
    pl->nslots = pool_slots_per_thread * (helpers + 1);
    pl->nfree = pl->nslots;
    pl->wait_base_ns = pool_wait_base_ns;
    pl->wait_ns_per_byte = pool_wait_ns_per_byte;
    pl->helper_delay_ns = pool_helper_delay_ns;
    pl->slots = PyMem_RawCalloc((size_t)pl->nslots, sizeof(Slot));
    if (pl->slots == NULL) {
        return 0;
    }
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->freed, NULL);
    for (i = 0; i < helpers; i++) {
        if (pthread_create(&pl->threads[i], NULL, pool_helper, pl) != 0) {
            break;
        }
        pl->nthreads++;
    }
    return pl->nthreads;
}

static long long
pool_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A short busy wait (~0.1-1 us) that tells the CPU so. */
static inline void
pool_pause(void)
{
    int i;
    for (i = 0; i < 16; i++) {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
        __builtin_ia32_pause();
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
}

/*
 * The parsing thread's turn at ordinal j (see above): the READY slot of j, or NULL when the
 * parsing thread is to decompress j itself (nobody claimed it, or its helper overran the wait,
 * in which case the slot is abandoned).  *dctx is the parsing thread's context, for the
 * batches it decompresses into slots while it waits.
 */
static Slot *
pool_take(Pool *pl, Py_ssize_t j, void **dctx)
{
    Slot *slot = &pl->slots[j % pl->nslots];
    Slot *got = NULL;
    long long deadline = -1;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        Py_ssize_t h = pl->next;
        Slot *hs;
        if (h <= j) {
            pl->next = j + 1; /* nobody has it: decompressed here, no slot */
            break;
        }
        if (slot->j == j && slot->state == SLOT_READY) {
            got = slot;
            break;
        }
        if (slot->j != j || slot->state != SLOT_BUSY) {
            break; /* never expected (j was claimed into its slot): decompress it here */
        }
        hs = &pl->slots[h % pl->nslots];
        if (h < pl->nz && hs->state == SLOT_FREE) { /* a helper is at j: help meanwhile */
            pool_claim(pl, hs, h);
            pthread_mutex_unlock(&pl->mu);
            pool_decompress(pl, hs, h, dctx);
            pthread_mutex_lock(&pl->mu);
            deadline = -1; /* the wait starts when there is nothing left to help with */
            continue;
        }
        if (deadline < 0) {
            deadline = pool_now_ns() + pl->wait_base_ns +
                       pl->wait_ns_per_byte * (long long)pl->size[pl->zk[j]];
        }
        else if (pool_now_ns() >= deadline) {
            slot->abandoned = 1; /* its helper is not running: overtake it */
            break;
        }
        pthread_mutex_unlock(&pl->mu);
        pool_pause();
        pthread_mutex_lock(&pl->mu);
    }
    pthread_mutex_unlock(&pl->mu);
    return got;
}

static void
pool_release(Pool *pl, Slot *slot)
{
    pthread_mutex_lock(&pl->mu);
    pool_freed(pl, slot);
    pthread_mutex_unlock(&pl->mu);
}

/* Stop the helpers (mid-run too), join them, free the slots. */
static void
pool_end(Pool *pl)
{
    int i;
    if (pl->slots == NULL) {
        return;
    }
    pthread_mutex_lock(&pl->mu);
    pl->stop = 1;
    pthread_cond_broadcast(&pl->freed);
    pthread_mutex_unlock(&pl->mu);
    for (i = 0; i < pl->nthreads; i++) {
        pthread_join(pl->threads[i], NULL);
    }
    for (i = 0; i < pl->nslots; i++) {
        PyMem_RawFree(pl->slots[i].p);
    }
    PyMem_RawFree(pl->slots);
    pl->slots = NULL;
    pthread_cond_destroy(&pl->freed);
    pthread_mutex_destroy(&pl->mu);
}
#endif /* KQ_HAVE_THREADS */

/* A C-contiguous one-dimensional buffer of `n` items of `itemsize` bytes (ints). */
static int
int_column(PyObject *obj, Py_ssize_t itemsize, Py_ssize_t n, int writable, const char *what,
           Py_buffer *view)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    const char *f;
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        return -1;
    }
    f = view->format != NULL ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') {
        f++;
    }
    if (view->itemsize != itemsize || view->ndim > 1 || strlen(f) != 1 ||
        strchr("bBhHiIlLqQ?", *f) == NULL || (n >= 0 && view->len != n * itemsize)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "add_batches: %s must be %zd contiguous %zd-byte ints",
                     what, n, itemsize);
        return -1;
    }
    return 0;
}

/*
 * The decoder's bulk path: the v2 batches of `buf` at positions[k] with sizes[k] (each at
 * least 61 bytes, inside buf), read with the broker's full reader (buffer reader for codec 0,
 * stream reader otherwise).  Each batch's CRC-32C over [position + 21, position + size) is
 * compared with crcs[k] into crc_valid[k] right before its records are parsed, so the batch is
 * read from memory once.  Runs without the GIL except to call read.
 */
static int
ps_add_batches(ParseState *ps, int with_data, Py_ssize_t reserve, int threads,
               PyObject *buf_obj, PyObject *positions_obj, PyObject *sizes_obj,
               PyObject *crcs_obj, PyObject *counts_obj, PyObject *codecs_obj, PyObject *read,
               PyObject *crc_valid_obj)
{
    Py_buffer buf, pos_v, size_v, crc_v, count_v, codec_v, valid_v;
    int have[7] = {0};
    Py_ssize_t m, k, nz = 0, j = 0;
    Py_ssize_t *zk = NULL;
    int rc = -1, st = ST_OK, pooled = 0;
#ifdef KQ_HAVE_THREADS
    Pool pool;
    memset(&pool, 0, sizeof(pool));
#endif

    if (PyObject_GetBuffer(buf_obj, &buf, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    have[0] = 1;
    if (int_column(positions_obj, 8, -1, 0, "positions", &pos_v) < 0) {
        goto done;
    }
    have[1] = 1;
    m = pos_v.len / 8;
    if (int_column(sizes_obj, 8, m, 0, "sizes", &size_v) < 0) {
        goto done;
    }
    have[2] = 1;
    if (int_column(crcs_obj, 4, m, 0, "crcs", &crc_v) < 0) {
        goto done;
    }
    have[3] = 1;
    if (int_column(counts_obj, 4, m, 0, "counts", &count_v) < 0) {
        goto done;
    }
    have[4] = 1;
    if (int_column(codecs_obj, 4, m, 0, "codecs", &codec_v) < 0) {
        goto done;
    }
    have[5] = 1;
    if (int_column(crc_valid_obj, 1, m, 1, "crc_valid", &valid_v) < 0) {
        goto done;
    }
    have[6] = 1;
    for (k = 0; k < m; k++) {
        int64_t p = ((const int64_t *)pos_v.buf)[k], s = ((const int64_t *)size_v.buf)[k];
        int32_t c = ((const int32_t *)codec_v.buf)[k];
        if (p < 0 || s < SCAN_V2_HEADER_SIZE || p > (int64_t)buf.len - s || c < 0 ||
            c > 254) {
            PyErr_Format(PyExc_ValueError,
                         "add_batches: batch %zd (position %lld, size %lld, codec %d) is not "
                         "a v2 batch inside the buffer", k, (long long)p, (long long)s, (int)c);
            goto done;
        }
        if (c != 0 && (read == NULL || read == Py_None)) {
            PyErr_SetString(PyExc_ValueError, "codecs need a read function");
            goto done;
        }
    }
    if (!ps->started && ps_start(ps, with_data, reserve) < 0) {
        goto done;
    }
    if (ps_reserve_batches(ps, m) != ST_OK) {
        PyErr_NoMemory();
        goto done;
    }
    if (threads > 1) {
        for (k = 0; k < m; k++) {
            nz += fast_codec(((const int32_t *)codec_v.buf)[k]);
        }
    }
#ifdef KQ_HAVE_THREADS
    if (nz >= POOL_MIN_BATCHES) {
        zk = PyMem_RawMalloc((size_t)nz * sizeof(Py_ssize_t));
        if (zk == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (k = 0; k < m; k++) {
            if (fast_codec(((const int32_t *)codec_v.buf)[k])) {
                zk[j++] = k;
            }
        }
        pool.buf = (const uint8_t *)buf.buf;
        pool.pos = (const int64_t *)pos_v.buf;
        pool.size = (const int64_t *)size_v.buf;
        pool.zk = zk;
        pool.codec = (const int32_t *)codec_v.buf;
        pool.nz = nz;
        pooled = pool_start(&pool, threads - 1) > 0;
        j = 0;
    }
#endif
    ps_release(ps);
    for (k = 0; k < m; k++) {
        const uint8_t *b = (const uint8_t *)buf.buf + ((const int64_t *)pos_v.buf)[k];
        Py_ssize_t s = (Py_ssize_t)((const int64_t *)size_v.buf)[k];
        int codec = (int)((const int32_t *)codec_v.buf)[k];
        uint32_t stored = ((const uint32_t *)crc_v.buf)[k];
        long long count = (long long)((const int32_t *)count_v.buf)[k];
        int mode = codec == 0 ? M_BUFFER : M_STREAM;
#ifdef KQ_HAVE_THREADS
        Slot *slot;
#endif
        ((uint8_t *)valid_v.buf)[k] =
            crc32c_value(b + SCAN_V2_CRC_OFFSET, (size_t)(s - SCAN_V2_CRC_OFFSET)) == stored;
#ifdef KQ_HAVE_THREADS
        if (pooled && fast_codec(codec) && (slot = pool_take(&pool, j++, &ps->zs.dctx)) != NULL) {
            if (slot->result < 0) {
                pool_release(&pool, slot);
                st = ST_NOMEM;
                break;
            }
            if (slot->result == 1) {
                st = ps_batch(ps, slot->p, (Py_ssize_t)slot->len, codec, mode, 0, count,
                              read, k, FAST_DONE);
            }
            else {
                st = ps_batch(ps, b + SCAN_V2_HEADER_SIZE, s - SCAN_V2_HEADER_SIZE, codec,
                              mode, 0, count, read, k, FAST_DECLINED);
            }
            pool_release(&pool, slot);
        }
        else
#endif
        {
            st = ps_batch(ps, b + SCAN_V2_HEADER_SIZE, s - SCAN_V2_HEADER_SIZE, codec, mode,
                          0, count, read, k, FAST_TRY);
        }
        if (st != ST_OK) {
            break;
        }
        ps_release(ps); /* read may have taken the GIL */
    }
#ifdef KQ_HAVE_THREADS
    pool_end(&pool); /* no Python in it: fine with or without the GIL */
#endif
    ps_acquire(ps);
    if (st != ST_OK) {
        set_status_error(st);
        goto done;
    }
    rc = 0;

done:
    PyMem_RawFree(zk);
    {
        Py_buffer *views[7] = {&buf, &pos_v, &size_v, &crc_v, &count_v, &codec_v, &valid_v};
        int i;
        for (i = 0; i < 7; i++) {
            if (have[i]) {
                PyBuffer_Release(views[i]);
            }
        }
    }
    return rc;
}

/* The 17 fields of ParsedRecords; the state's buffers are handed over (ps is spent). */
static PyObject *
ps_finish(ParseState *ps, int with_data)
{
    PyObject *fields[17] = {NULL};
    PyObject *result = NULL, *errors = NULL;
    Out *o = &ps->o;
    Py_ssize_t k;

    if (!ps->started && ps_start(ps, with_data, 0) < 0) {
        return NULL;
    }
    errors = PyList_New(ps->nb);
    if (errors == NULL) {
        return NULL;
    }
    for (k = 0; k < ps->nb; k++) {
        const BatchErr *e = &ps->errs[k];
        PyObject *item = e->kind == 0 ? Py_NewRef(Py_None)
                         : e->kind == K_INVALID_COUNT
                             ? Py_BuildValue("(iLi)", e->kind, (long long)e->a, 0)
                             : Py_BuildValue("(iLL)", e->kind, (long long)e->a, (long long)e->b);
        if (item == NULL) {
            Py_DECREF(errors);
            return NULL;
        }
        PyList_SET_ITEM(errors, k, item);
    }
    if (ps->huge != NULL) {
        for (k = 0; k < PyList_GET_SIZE(ps->huge); k++) {
            PyObject *pair = PyList_GET_ITEM(ps->huge, k);
            PyObject *item = Py_BuildValue("(iOi)", K_INVALID_COUNT, PyTuple_GET_ITEM(pair, 1), 0);
            Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
            if (item == NULL || PyList_SetItem(errors, at, item) < 0) {
                Py_DECREF(errors);
                return NULL;
            }
        }
    }

    fields[0] = wrap_array(ps->batch_n, ps->nb * (Py_ssize_t)sizeof(int64_t), dt_int64);
    ps->batch_n = NULL;
    if (fields[0] == NULL) {
        Py_DECREF(errors);
        goto done;
    }
    fields[1] = errors;

#define TAKE(slot, ptr, count, dtype)                                                         \
    do {                                                                                      \
        void *p_ = (ptr);                                                                     \
        (ptr) = NULL;                                                                         \
        fields[slot] = wrap_array(p_, (Py_ssize_t)(count) * (Py_ssize_t)sizeof(*(ptr)),      \
                                  (dtype));                                                   \
        if (fields[slot] == NULL) {                                                           \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

    TAKE(2, o->ts, o->n, dt_int64);
    TAKE(3, o->offd, o->n, dt_int32);
    TAKE(4, o->attr, o->n, dt_int8);
    TAKE(5, o->klen, o->n, dt_int32);
    TAKE(6, o->vlen, o->n, dt_int32);
    TAKE(7, o->hcnt, o->n, dt_int32);
    if (with_data) {
        TAKE(8, o->koff, o->n + 1, dt_int32);
        if ((fields[9] = finish_databuf(&o->key)) == NULL) {
            goto done;
        }
        TAKE(10, o->voff, o->n + 1, dt_int32);
        if ((fields[11] = finish_databuf(&o->value)) == NULL) {
            goto done;
        }
        TAKE(12, o->hkoff, o->hn + 1, dt_int32);
        if ((fields[13] = finish_databuf(&o->hkey)) == NULL) {
            goto done;
        }
        TAKE(14, o->hvoff, o->hn + 1, dt_int32);
        if ((fields[15] = finish_databuf(&o->hval)) == NULL) {
            goto done;
        }
        TAKE(16, o->hvlen, o->hn, dt_int32);
    }
    else {
        for (k = 8; k < 17; k++) {
            fields[k] = Py_NewRef(Py_None);
        }
    }
#undef TAKE

    result = PyTuple_New(17);
    if (result == NULL) {
        goto done;
    }
    for (k = 0; k < 17; k++) {
        PyTuple_SET_ITEM(result, k, fields[k]); /* steals */
        fields[k] = NULL;
    }

done:
    for (k = 0; k < 17; k++) {
        Py_XDECREF(fields[k]);
    }
    ps_free(ps);
    return result;
}

PyDoc_STRVAR(release_buffers_doc,
"_release_buffers() -> int\n"
"\n"
"Drop the large data buffers kept for reuse by later parses (those still referenced by a\n"
"table live on with it); returns how many were kept.");

static PyObject *
py_release_buffers(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    int i, n = 0;
    for (i = 0; i < BUFPOOL_SIZE; i++) {
        if (bufpool[i] != NULL) {
            n++;
            Py_CLEAR(bufpool[i]);
        }
    }
    return PyLong_FromLong(n);
}

PyDoc_STRVAR(pool_tuning_doc,
"_pool_tuning(wait_base_ns=-1, wait_ns_per_byte=-1, slots_per_thread=-1, helper_delay_ns=-1)\n"
"    -> tuple\n"
"\n"
"add_batches' helper-thread ring: how long the parsing thread waits for a batch a helper is\n"
"decompressing before it decompresses that batch itself (wait_base_ns plus wait_ns_per_byte\n"
"per byte of the batch), the ring's slots per thread, and a sleep each helper takes before\n"
"each batch (0 but in tests: a helper that is not running).  Negative arguments leave a value\n"
"as it is; returns the four values before the call; takes effect at the next add_batches.\n"
"For tests: (0, 0, 1, 2_000_000) makes the parsing thread overtake every slow helper.");

static PyObject *
py_pool_tuning(PyObject *Py_UNUSED(module), PyObject *args)
{
    long long base = -1, per_byte = -1, delay = -1;
    int slots = -1;
    PyObject *before;
    if (!PyArg_ParseTuple(args, "|LLiL:_pool_tuning", &base, &per_byte, &slots, &delay)) {
        return NULL;
    }
    if (base > 60LL * 1000000000LL || per_byte > 1000000LL || slots == 0 || slots > 64 ||
        delay > 1000000000LL) {
        PyErr_SetString(PyExc_ValueError,
                        "_pool_tuning: wait_base_ns must be at most 60 s, wait_ns_per_byte at "
                        "most 1 ms, slots_per_thread from 1 to 64 and helper_delay_ns at most "
                        "1 s");
        return NULL;
    }
    before = Py_BuildValue("LLiL", pool_wait_base_ns, pool_wait_ns_per_byte,
                           pool_slots_per_thread, pool_helper_delay_ns);
    if (base >= 0) {
        pool_wait_base_ns = base;
    }
    if (per_byte >= 0) {
        pool_wait_ns_per_byte = per_byte;
    }
    if (slots > 0) {
        pool_slots_per_thread = slots;
    }
    if (delay >= 0) {
        pool_helper_delay_ns = delay;
    }
    return before;
}

PyDoc_STRVAR(parse_records_doc,
"parse_records(regions, counts, modes=1, with_data=True, failed=None, codecs=None,\n"
"              read=None) -> tuple\n"
"\n"
"C implementation of kqlab.kafka._records_py.parse_records; returns the fields of\n"
"ParsedRecords as a 17-tuple (see kqlab.kafka.records_parser).  zstd and lz4 regions are\n"
"decompressed here when their library is bound (_bind) and they decode whole; every other\n"
"compressed region is parsed from what read(i) delivers.");

static PyObject *
parse_records(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"regions", "counts", "modes", "with_data", "failed", "codecs",
                             "read", NULL};
    PyObject *regions_in, *counts_in, *modes_in = NULL, *failed_in = Py_None;
    PyObject *codecs_in = Py_None, *read = Py_None;
    int with_data = 1;
    ParseState ps;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OpOOO:parse_records", kwlist,
                                     &regions_in, &counts_in, &modes_in, &with_data, &failed_in,
                                     &codecs_in, &read)) {
        return NULL;
    }
    memset(&ps, 0, sizeof(ps));
    if (ps_add(&ps, with_data, regions_in, counts_in, modes_in, failed_in, codecs_in, read) <
        0) {
        ps_free(&ps);
        return NULL;
    }
    return ps_finish(&ps, with_data);
}

/* -- RecordsParser: the same parse, fed piece by piece ---------------------------------------- */

typedef struct {
    PyObject_HEAD
    ParseState ps;
    int with_data;
    Py_ssize_t reserve;
    int threads; /* add_batches decompresses zstd batches on this many threads */
    int busy;    /* a method is running (it may have released the GIL) */
    int closed; /* finished, or broken by an error: no further use */
} RecordsParserObject;

static int
rp_enter(RecordsParserObject *self)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "RecordsParser is in use by another thread");
        return -1;
    }
    if (self->closed) {
        PyErr_SetString(PyExc_RuntimeError,
                        "RecordsParser is finished (or an error left it incomplete)");
        return -1;
    }
    self->busy = 1;
    return 0;
}

static int
rp_init(RecordsParserObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"with_data", "reserve", "threads", NULL};
    int with_data = 1, threads = 1;
    Py_ssize_t reserve = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pni:RecordsParser", kwlist, &with_data,
                                     &reserve, &threads)) {
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "RecordsParser is in use by another thread");
        return -1;
    }
    ps_free(&self->ps);
    memset(&self->ps, 0, sizeof(self->ps));
    self->with_data = with_data;
    self->reserve = reserve > 0 ? reserve : 0;
    self->threads = threads < 1 ? 1 : threads > POOL_MAX_HELPERS + 1 ? POOL_MAX_HELPERS + 1
                                                                      : threads;
    self->closed = 0;
    return 0;
}

static void
rp_dealloc(RecordsParserObject *self)
{
    ps_free(&self->ps);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(rp_add_doc,
"add(regions, counts, modes=1, failed=None, codecs=None, read=None)\n"
"\n"
"Parse more regions, as parse_records would (read(i) indexes this call's regions).");

static PyObject *
rp_add(RecordsParserObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"regions", "counts", "modes", "failed", "codecs", "read", NULL};
    PyObject *regions_in, *counts_in, *modes_in = NULL, *failed_in = Py_None;
    PyObject *codecs_in = Py_None, *read = Py_None;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOOO:add", kwlist, &regions_in,
                                     &counts_in, &modes_in, &failed_in, &codecs_in, &read)) {
        return NULL;
    }
    if (rp_enter(self) < 0) {
        return NULL;
    }
    if (!self->ps.started && self->reserve > 0 &&
        ps_start(&self->ps, self->with_data, self->reserve) < 0) {
        self->busy = 0;
        self->closed = 1;
        return NULL;
    }
    rc = ps_add(&self->ps, self->with_data, regions_in, counts_in, modes_in, failed_in,
                codecs_in, read);
    self->busy = 0;
    if (rc < 0) {
        self->closed = 1;
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(rp_add_batches_doc,
"add_batches(buf, positions, sizes, crcs, counts, codecs, read, crc_valid)\n"
"\n"
"Parse the records of whole v2 batches of buf (int64 positions and sizes, uint32 stored\n"
"CRCs, int32 record counts and codec ids) with the broker's full reader: the buffer reader\n"
"for codec 0, the stream reader otherwise (read(k) as for add, k indexing this call's\n"
"batches).  Each batch's CRC-32C check goes into crc_valid[k] (a writable bool array),\n"
"computed right before its records are read so the batch is read from memory once.");

static PyObject *
rp_add_batches(RecordsParserObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "positions", "sizes", "crcs", "counts", "codecs", "read",
                             "crc_valid", NULL};
    PyObject *buf, *positions, *sizes, *crcs, *counts, *codecs, *read, *crc_valid;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOO:add_batches", kwlist, &buf,
                                     &positions, &sizes, &crcs, &counts, &codecs, &read,
                                     &crc_valid)) {
        return NULL;
    }
    if (rp_enter(self) < 0) {
        return NULL;
    }
    rc = ps_add_batches(&self->ps, self->with_data, self->reserve, self->threads, buf,
                        positions, sizes, crcs, counts, codecs, read, crc_valid);
    self->busy = 0;
    if (rc < 0) {
        self->closed = 1;
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(rp_finish_doc,
"finish() -> tuple\n"
"\n"
"The 17 fields of ParsedRecords over everything added, as one parse_records call over all of\n"
"it returns them.  The parser is spent afterwards.");

static PyObject *
rp_finish(RecordsParserObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *result;
    if (rp_enter(self) < 0) {
        return NULL;
    }
    result = ps_finish(&self->ps, self->with_data);
    memset(&self->ps, 0, sizeof(self->ps));
    self->busy = 0;
    self->closed = 1;
    return result;
}

static PyObject *
rp_get_batches(RecordsParserObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->ps.nb);
}

static PyMethodDef rp_methods[] = {
    {"add", (PyCFunction)(void (*)(void))rp_add, METH_VARARGS | METH_KEYWORDS, rp_add_doc},
    {"add_batches", (PyCFunction)(void (*)(void))rp_add_batches, METH_VARARGS | METH_KEYWORDS,
     rp_add_batches_doc},
    {"finish", (PyCFunction)rp_finish, METH_NOARGS, rp_finish_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rp_getset[] = {
    {"batches", (getter)rp_get_batches, NULL, "Batches added so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(rp_doc,
"RecordsParser(with_data=True, reserve=0, threads=1)\n"
"\n"
"C implementation of kqlab.kafka._records_py.RecordsParser: one parse_records call fed\n"
"piece by piece (add, add_batches), finished once.  reserve: the value buffer's first\n"
"capacity in bytes (a hint; the buffer grows as needed).  threads: add_batches decompresses\n"
"the zstd batches of a run on this many threads (helpers ahead of the parse; the columns\n"
"are the same whatever the number).");

static PyTypeObject RecordsParser_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kqlab.kafka._crecords.RecordsParser",
    .tp_basicsize = sizeof(RecordsParserObject),
    .tp_itemsize = 0,
    .tp_dealloc = (destructor)rp_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = rp_doc,
    .tp_methods = rp_methods,
    .tp_getset = rp_getset,
    .tp_init = (initproc)rp_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------------------------------ */
/* CRC-32C (Castagnoli)                                                                        */
/* ------------------------------------------------------------------------------------------ */

/*
 * Two implementations of the same register update (the register is the inverted CRC):
 * - crc32c_sw: portable slicing-by-8 (eight 256-entry tables, bytes assembled explicitly so it
 *   is endian-neutral);
 * - crc32c_hw: the SSE4.2 crc32 instruction, 8 bytes at a time, on three interleaved streams
 *   (the instruction's latency is three times its throughput), whose registers are merged with
 *   "append n zero bytes" operators applied through four 256-entry tables (Mark Adler's method).
 * crc32c_update picks the hardware path when the CPU has SSE4.2 (checked once at import).
 */

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */

/* Buffers at least this long are checksummed with the GIL released. */
#define CRC_RELEASE_GIL_MIN_BYTES 65536

static uint32_t crc32c_table[8][256];
static int crc32c_ready = 0;
static int crc32c_have_hw = 0;

static void
crc32c_init_sw(void)
{
    uint32_t n, k, c;
    for (n = 0; n < 256; n++) {
        c = n;
        for (k = 0; k < 8; k++) {
            c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        }
        crc32c_table[0][n] = c;
    }
    for (n = 0; n < 256; n++) {
        c = crc32c_table[0][n];
        for (k = 1; k < 8; k++) {
            c = crc32c_table[0][c & 0xFFu] ^ (c >> 8);
            crc32c_table[k][n] = c;
        }
    }
}

static inline uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/* Update the (inverted) register `crc` with p[0:len], slicing-by-8. */
static uint32_t
crc32c_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len >= 8) {
        uint32_t lo = crc ^ le32(p);
        uint32_t hi = le32(p + 4);
        crc = crc32c_table[7][lo & 0xFFu] ^ crc32c_table[6][(lo >> 8) & 0xFFu] ^
              crc32c_table[5][(lo >> 16) & 0xFFu] ^ crc32c_table[4][lo >> 24] ^
              crc32c_table[3][hi & 0xFFu] ^ crc32c_table[2][(hi >> 8) & 0xFFu] ^
              crc32c_table[1][(hi >> 16) & 0xFFu] ^ crc32c_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        crc = crc32c_table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
        len--;
    }
    return crc;
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KQ_CRC32C_X86 1
#include <nmmintrin.h>

/*
 * Stream lengths of the three-way interleave (multiples of 8; powers of two).  Measured on a
 * Zen 4 with data streaming from memory: 32768/256 ran 21-23 GB/s, while 4096 or 512 byte
 * strides between the streams fell to 8-15 GB/s (the hardware prefetchers track them worse).
 */
#define CRC_LONG 32768
#define CRC_SHORT 256

/* crc32c_zeros_long[k][b]: the register after LONG zero bytes, from byte b at position k */
static uint32_t crc32c_zeros_long[4][256];
static uint32_t crc32c_zeros_short[4][256];

/* GF(2) matrix (32 columns, bit i of vec selects mat[i]) times vector. */
static uint32_t
gf2_matrix_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    while (vec != 0) {
        if (vec & 1u) {
            sum ^= *mat;
        }
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void
gf2_matrix_square(uint32_t *square, const uint32_t *mat)
{
    int n;
    for (n = 0; n < 32; n++) {
        square[n] = gf2_matrix_times(mat, mat[n]);
    }
}

/* The operator appending `len` zero bytes (len a power of two, >= 1) to a register. */
static void
crc32c_zeros_op(uint32_t *even, size_t len)
{
    uint32_t odd[32];
    uint32_t row = 1;
    int n;

    odd[0] = CRC32C_POLY; /* one zero bit */
    for (n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_matrix_square(even, odd); /* two zero bits */
    gf2_matrix_square(odd, even); /* four zero bits */
    /* each square doubles: even holds one zero byte after the first, odd two, ... */
    for (;;) {
        gf2_matrix_square(even, odd);
        len >>= 1;
        if (len == 0) {
            return;
        }
        gf2_matrix_square(odd, even);
        len >>= 1;
        if (len == 0) {
            break;
        }
    }
    memcpy(even, odd, sizeof(odd));
}

static void
crc32c_zeros(uint32_t zeros[4][256], size_t len)
{
    uint32_t op[32];
    uint32_t n;
    crc32c_zeros_op(op, len);
    for (n = 0; n < 256; n++) {
        zeros[0][n] = gf2_matrix_times(op, n);
        zeros[1][n] = gf2_matrix_times(op, n << 8);
        zeros[2][n] = gf2_matrix_times(op, n << 16);
        zeros[3][n] = gf2_matrix_times(op, n << 24);
    }
}

static inline uint32_t
crc32c_shift(uint32_t zeros[4][256], uint32_t crc)
{
    return zeros[0][crc & 0xFFu] ^ zeros[1][(crc >> 8) & 0xFFu] ^
           zeros[2][(crc >> 16) & 0xFFu] ^ zeros[3][crc >> 24];
}

#if defined(__x86_64__)
typedef uint64_t crc_reg_t;

__attribute__((target("sse4.2"))) static inline crc_reg_t
crc_step8(crc_reg_t c, const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return (crc_reg_t)_mm_crc32_u64(c, v);
}
#else
typedef uint32_t crc_reg_t;

__attribute__((target("sse4.2"))) static inline crc_reg_t
crc_step8(crc_reg_t c, const uint8_t *p)
{
    uint32_t a, b;
    memcpy(&a, p, 4);
    memcpy(&b, p + 4, 4);
    return _mm_crc32_u32(_mm_crc32_u32(c, a), b);
}
#endif

/* Update the (inverted) register `crc` with p[0:len] using the SSE4.2 crc32 instruction. */
__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(uint32_t crc, const uint8_t *p, size_t len)
{
    crc_reg_t c0 = crc;

    /* bring p to an 8-byte boundary */
    while (len > 0 && ((uintptr_t)p & 7u) != 0) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        len--;
    }
    /* three independent streams of CRC_LONG bytes, merged with the zeros operator */
    while (len >= 3 * (size_t)CRC_LONG) {
        crc_reg_t c1 = 0, c2 = 0;
        const uint8_t *const stop = p + CRC_LONG;
        do {
            c0 = crc_step8(c0, p);
            c1 = crc_step8(c1, p + CRC_LONG);
            c2 = crc_step8(c2, p + 2 * CRC_LONG);
            p += 8;
        } while (p < stop);
        c0 = crc32c_shift(crc32c_zeros_long, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc32c_shift(crc32c_zeros_long, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_LONG;
        len -= 3 * (size_t)CRC_LONG;
    }
    while (len >= 3 * (size_t)CRC_SHORT) {
        crc_reg_t c1 = 0, c2 = 0;
        const uint8_t *const stop = p + CRC_SHORT;
        do {
            c0 = crc_step8(c0, p);
            c1 = crc_step8(c1, p + CRC_SHORT);
            c2 = crc_step8(c2, p + 2 * CRC_SHORT);
            p += 8;
        } while (p < stop);
        c0 = crc32c_shift(crc32c_zeros_short, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc32c_shift(crc32c_zeros_short, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_SHORT;
        len -= 3 * (size_t)CRC_SHORT;
    }
    while (len >= 8) {
        c0 = crc_step8(c0, p);
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        len--;
    }
    return (uint32_t)c0;
}
#endif /* KQ_CRC32C_X86 */

/* Build the tables and probe the CPU (once, at import, with the GIL held). */
static void
crc32c_init(void)
{
    if (crc32c_ready) {
        return;
    }
    crc32c_init_sw();
#ifdef KQ_CRC32C_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        crc32c_zeros(crc32c_zeros_long, CRC_LONG);
        crc32c_zeros(crc32c_zeros_short, CRC_SHORT);
        crc32c_have_hw = 1;
    }
#endif
    crc32c_ready = 1;
}

/* CRC-32C of p[0:len] (hardware when available). */
static uint32_t
crc32c_value(const uint8_t *p, size_t len)
{
#ifdef KQ_CRC32C_X86
    if (crc32c_have_hw) {
        return ~crc32c_hw(0xFFFFFFFFu, p, len);
    }
#endif
    return ~crc32c_sw(0xFFFFFFFFu, p, len);
}

/*
 * Hold obj's bytes in *view.  A buffer that cannot be exported as plain C-contiguous bytes
 * (a strided memoryview, a non-contiguous array) is copied the way bytes(obj) copies it; *copy
 * then owns the copy.  Objects without the buffer protocol raise as PyObject_GetBuffer does.
 */
static int
get_bytes_view(PyObject *obj, Py_buffer *view, PyObject **copy)
{
    *copy = NULL;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) == 0) {
        return 0;
    }
    if (!PyObject_CheckBuffer(obj)) {
        return -1;
    }
    PyErr_Clear();
    *copy = PyBytes_FromObject(obj);
    if (*copy == NULL) {
        return -1;
    }
    if (PyObject_GetBuffer(*copy, view, PyBUF_SIMPLE) < 0) {
        Py_CLEAR(*copy);
        return -1;
    }
    return 0;
}

static PyObject *
crc32c_of(PyObject *obj, int software)
{
    Py_buffer view;
    PyObject *copy;
    const uint8_t *p;
    size_t len;
    uint32_t crc;

    if (get_bytes_view(obj, &view, &copy) < 0) {
        return NULL;
    }
    p = (const uint8_t *)view.buf;
    len = (size_t)view.len;
    if (view.len >= CRC_RELEASE_GIL_MIN_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        crc = software ? ~crc32c_sw(0xFFFFFFFFu, p, len) : crc32c_value(p, len);
        Py_END_ALLOW_THREADS
    }
    else {
        crc = software ? ~crc32c_sw(0xFFFFFFFFu, p, len) : crc32c_value(p, len);
    }
    PyBuffer_Release(&view);
    Py_XDECREF(copy);
    return PyLong_FromUnsignedLong((unsigned long)crc);
}

PyDoc_STRVAR(crc32c_doc,
"crc32c(buf) -> int\n"
"\n"
"CRC-32C (Castagnoli) of a bytes-like object, as an unsigned int; equals\n"
"google_crc32c.value(bytes(buf)).  Uses the SSE4.2 crc32 instruction when the CPU has it\n"
"(see CRC32C_HARDWARE), else a slicing-by-8 table.");

static PyObject *
py_crc32c(PyObject *Py_UNUSED(module), PyObject *obj)
{
    return crc32c_of(obj, 0);
}

PyDoc_STRVAR(crc32c_sw_doc,
"_crc32c_sw(buf) -> int\n"
"\n"
"crc32c(buf) computed with the portable slicing-by-8 tables (for tests and benchmarks).");

static PyObject *
py_crc32c_sw(PyObject *Py_UNUSED(module), PyObject *obj)
{
    return crc32c_of(obj, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* scan_batches                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* kqlab.kafka._scan_py stop kinds */
enum { STOP_END = 0, STOP_SHORT = 1, STOP_CORRUPT_LENGTH = 2, STOP_TRUNCATED = 3 };

#define SCAN_LOG_OVERHEAD 12
#define SCAN_HEADER_SIZE_UP_TO_MAGIC 17
#define SCAN_MIN_RECORD_OVERHEAD 14
#define SCAN_V2_HEADER 61
#define SCAN_V2_CRC_START 21
#define INITIAL_BATCHES 64

/* the 15 columns, in the order of the result tuple */
enum {
    C_POSITION,
    C_SIZE,
    C_MAGIC,
    C_BASE_OFFSET,
    C_LEADER_EPOCH,
    C_CRC,
    C_ATTRIBUTES,
    C_LAST_OFFSET_DELTA,
    C_BASE_TIMESTAMP,
    C_MAX_TIMESTAMP,
    C_PRODUCER_ID,
    C_PRODUCER_EPOCH,
    C_BASE_SEQUENCE,
    C_RECORDS_COUNT,
    C_CRC_VALID,
    SCAN_NCOLS
};

static const size_t scan_itemsize[SCAN_NCOLS] = {
    sizeof(int64_t), sizeof(int64_t), sizeof(int8_t),  sizeof(int64_t), sizeof(int32_t),
    sizeof(uint32_t), sizeof(int16_t), sizeof(int32_t), sizeof(int64_t), sizeof(int64_t),
    sizeof(int64_t), sizeof(int16_t), sizeof(int32_t), sizeof(int32_t), sizeof(uint8_t),
};

static PyObject *dt_int16 = NULL;
static PyObject *dt_uint32 = NULL;
static PyObject *dt_bool = NULL;

static PyObject **const scan_dtype[SCAN_NCOLS] = {
    &dt_int64, &dt_int64, &dt_int8,  &dt_int64, &dt_int32, &dt_uint32, &dt_int16, &dt_int32,
    &dt_int64, &dt_int64, &dt_int64, &dt_int16, &dt_int32, &dt_int32,  &dt_bool,
};

typedef struct {
    Py_ssize_t n;   /* batches found */
    Py_ssize_t cap; /* entries allocated in every column */
    void *col[SCAN_NCOLS];
    Py_ssize_t stop_pos;
    int stop_kind;
    int64_t stop_length;
} Scan;

#define COL(s, type, c) ((type *)(s)->col[c])

static int
grow_scan(Scan *s, Py_ssize_t nc)
{
    int c;
    if (nc > PY_SSIZE_T_MAX / 16) {
        return ST_NOMEM;
    }
    for (c = 0; c < SCAN_NCOLS; c++) {
        void *q = PyMem_RawRealloc(s->col[c], (size_t)nc * scan_itemsize[c]);
        if (q == NULL) {
            return ST_NOMEM;
        }
        s->col[c] = q;
    }
    s->cap = nc;
    return ST_OK;
}

static void
scan_free(Scan *s)
{
    int c;
    for (c = 0; c < SCAN_NCOLS; c++) {
        PyMem_RawFree(s->col[c]);
        s->col[c] = NULL;
    }
}

static inline uint16_t
be16(const uint8_t *p)
{
    return (uint16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

static inline uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
           (uint32_t)p[3];
}

static inline uint64_t
be64(const uint8_t *p)
{
    return ((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4);
}

/*
 * Walk buf[pos:end] batch by batch (kqlab.kafka.log.scan_buffer's rules).  Runs without the
 * GIL: it only reads buf (held through the buffer protocol) and grows PyMem_Raw columns.
 */
static int
scan_walk(Scan *s, const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end, int check_crc)
{
    s->stop_length = -1;
    for (;;) {
        const Py_ssize_t r = end - pos;
        const uint8_t *b = buf + pos;
        Py_ssize_t size, i;
        int32_t length;
        int8_t magic;
        uint8_t ok = 0;

        if (r == 0) {
            s->stop_kind = STOP_END;
            break;
        }
        if (r < SCAN_LOG_OVERHEAD) {
            s->stop_kind = STOP_SHORT;
            break;
        }
        length = (int32_t)be32(b + 8);
        if (length < SCAN_MIN_RECORD_OVERHEAD) {
            s->stop_kind = STOP_CORRUPT_LENGTH;
            s->stop_length = length;
            break;
        }
        if (r < SCAN_HEADER_SIZE_UP_TO_MAGIC || (Py_ssize_t)length > r - SCAN_LOG_OVERHEAD) {
            s->stop_kind = STOP_TRUNCATED;
            s->stop_length = length;
            break;
        }
        /* the batch is [pos, pos + size), size <= r: every read below stays inside it */
        size = SCAN_LOG_OVERHEAD + (Py_ssize_t)length;
        i = s->n;
        if (UNLIKELY(i == s->cap)) {
            int st = grow_scan(s, s->cap * 2);
            if (st != ST_OK) {
                s->stop_pos = pos;
                return st;
            }
        }
        magic = (int8_t)b[16];
        COL(s, int64_t, C_POSITION)[i] = (int64_t)pos;
        COL(s, int64_t, C_SIZE)[i] = (int64_t)size;
        COL(s, int8_t, C_MAGIC)[i] = magic;
        COL(s, int64_t, C_BASE_OFFSET)[i] = (int64_t)be64(b);
        if (magic == 2 && size >= SCAN_V2_HEADER) {
            uint32_t crc = be32(b + 17);
            COL(s, int32_t, C_LEADER_EPOCH)[i] = (int32_t)be32(b + 12);
            COL(s, uint32_t, C_CRC)[i] = crc;
            COL(s, int16_t, C_ATTRIBUTES)[i] = (int16_t)be16(b + 21);
            COL(s, int32_t, C_LAST_OFFSET_DELTA)[i] = (int32_t)be32(b + 23);
            COL(s, int64_t, C_BASE_TIMESTAMP)[i] = (int64_t)be64(b + 27);
            COL(s, int64_t, C_MAX_TIMESTAMP)[i] = (int64_t)be64(b + 35);
            COL(s, int64_t, C_PRODUCER_ID)[i] = (int64_t)be64(b + 43);
            COL(s, int16_t, C_PRODUCER_EPOCH)[i] = (int16_t)be16(b + 51);
            COL(s, int32_t, C_BASE_SEQUENCE)[i] = (int32_t)be32(b + 53);
            COL(s, int32_t, C_RECORDS_COUNT)[i] = (int32_t)be32(b + 57);
            ok = check_crc &&
                 crc32c_value(b + SCAN_V2_CRC_START, (size_t)(size - SCAN_V2_CRC_START)) == crc;
        }
        else {
            COL(s, int32_t, C_LEADER_EPOCH)[i] = 0;
            COL(s, uint32_t, C_CRC)[i] = 0;
            COL(s, int16_t, C_ATTRIBUTES)[i] = 0;
            COL(s, int32_t, C_LAST_OFFSET_DELTA)[i] = 0;
            COL(s, int64_t, C_BASE_TIMESTAMP)[i] = 0;
            COL(s, int64_t, C_MAX_TIMESTAMP)[i] = 0;
            COL(s, int64_t, C_PRODUCER_ID)[i] = 0;
            COL(s, int16_t, C_PRODUCER_EPOCH)[i] = 0;
            COL(s, int32_t, C_BASE_SEQUENCE)[i] = 0;
            COL(s, int32_t, C_RECORDS_COUNT)[i] = 0;
        }
        COL(s, uint8_t, C_CRC_VALID)[i] = ok;
        s->n = i + 1;
        pos += size;
    }
    s->stop_pos = pos;
    return ST_OK;
}

/* An index argument: None -> dflt; huge values clip (and then fail the range check). */
static int
index_arg(PyObject *obj, Py_ssize_t dflt, Py_ssize_t *out)
{
    if (obj == NULL || obj == Py_None) {
        *out = dflt;
        return 0;
    }
    *out = PyNumber_AsSsize_t(obj, NULL);
    if (*out == -1 && PyErr_Occurred()) {
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(scan_batches_doc,
"scan_batches(buf, start=0, end=None, *, crc=True) -> tuple\n"
"\n"
"C implementation of kqlab.kafka._scan_py.scan_batches: the batches of buf[start:end]\n"
"(positions are absolute) as 15 numpy columns, then stop_pos, stop_kind, stop_length.\n"
"crc=False reads the headers only (crc_valid all False): for a caller that checks the\n"
"CRCs itself, batch by batch (RecordsParser.add_batches).");

static PyObject *
scan_batches(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buf", "start", "end", "crc", NULL};
    PyObject *obj, *start_obj = NULL, *end_obj = NULL;
    int check_crc = 1;
    PyObject *result = NULL, *copy = NULL;
    PyObject *fields[SCAN_NCOLS + 3] = {NULL};
    Py_ssize_t start, end = -1;
    Py_buffer view;
    int have_view = 0, st, c, k;
    Scan s;

    memset(&s, 0, sizeof(s));
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO$p:scan_batches", kwlist, &obj,
                                     &start_obj, &end_obj, &check_crc)) {
        return NULL;
    }
    /* indices first: __index__ may run Python code, which must not happen while buf is held */
    if (index_arg(start_obj, 0, &start) < 0) {
        return NULL;
    }
    if (end_obj != NULL && end_obj != Py_None && index_arg(end_obj, 0, &end) < 0) {
        return NULL;
    }
    if (get_bytes_view(obj, &view, &copy) < 0) {
        return NULL;
    }
    have_view = 1;
    if (end_obj == NULL || end_obj == Py_None) {
        end = view.len;
    }
    if (start < 0 || start > end || end > view.len) {
        PyErr_Format(PyExc_ValueError,
                     "scan_batches: need 0 <= start <= end <= len(buf), got start=%zd, "
                     "end=%zd, len(buf)=%zd", start, end, view.len);
        goto done;
    }
    if (grow_scan(&s, INITIAL_BATCHES) != ST_OK) {
        PyErr_NoMemory();
        goto done;
    }
    if (end - start >= CRC_RELEASE_GIL_MIN_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        st = scan_walk(&s, (const uint8_t *)view.buf, start, end, check_crc);
        Py_END_ALLOW_THREADS
    }
    else {
        st = scan_walk(&s, (const uint8_t *)view.buf, start, end, check_crc);
    }
    PyBuffer_Release(&view);
    Py_CLEAR(copy);
    have_view = 0;
    if (st != ST_OK) {
        PyErr_NoMemory();
        goto done;
    }

    for (c = 0; c < SCAN_NCOLS; c++) {
        void *p = s.col[c];
        s.col[c] = NULL;
        fields[c] = wrap_array(p, s.n * (Py_ssize_t)scan_itemsize[c], *scan_dtype[c]);
        if (fields[c] == NULL) {
            goto done;
        }
    }
    fields[SCAN_NCOLS] = PyLong_FromSsize_t(s.stop_pos);
    fields[SCAN_NCOLS + 1] = PyLong_FromLong(s.stop_kind);
    fields[SCAN_NCOLS + 2] = PyLong_FromLongLong((long long)s.stop_length);
    if (fields[SCAN_NCOLS] == NULL || fields[SCAN_NCOLS + 1] == NULL ||
        fields[SCAN_NCOLS + 2] == NULL) {
        goto done;
    }
    result = PyTuple_New(SCAN_NCOLS + 3);
    if (result == NULL) {
        goto done;
    }
    for (k = 0; k < SCAN_NCOLS + 3; k++) {
        PyTuple_SET_ITEM(result, k, fields[k]); /* steals */
        fields[k] = NULL;
    }

done:
    for (k = 0; k < SCAN_NCOLS + 3; k++) {
        Py_XDECREF(fields[k]);
    }
    if (have_view) {
        PyBuffer_Release(&view);
    }
    Py_XDECREF(copy);
    scan_free(&s);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* module                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static PyMethodDef crecords_methods[] = {
    {"parse_records", (PyCFunction)(void (*)(void))parse_records, METH_VARARGS | METH_KEYWORDS,
     parse_records_doc},
    {"scan_batches", (PyCFunction)(void (*)(void))scan_batches, METH_VARARGS | METH_KEYWORDS,
     scan_batches_doc},
    {"crc32c", (PyCFunction)py_crc32c, METH_O, crc32c_doc},
    {"_unpack", (PyCFunction)py_unpack, METH_VARARGS, unpack_doc},
    {"_bind", (PyCFunction)py_bind, METH_VARARGS, bind_doc},
    {"_pool_tuning", (PyCFunction)py_pool_tuning, METH_VARARGS, pool_tuning_doc},
    {"_release_buffers", (PyCFunction)py_release_buffers, METH_NOARGS, release_buffers_doc},
    {"_crc32c_sw", (PyCFunction)py_crc32c_sw, METH_O, crc32c_sw_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef crecords_module = {
    PyModuleDef_HEAD_INIT,
    "kqlab.kafka._crecords",
    "C accelerator for kqlab.kafka._records_py.parse_records and kqlab.kafka._scan_py\n"
    "(scan_batches, crc32c).",
    -1,
    crecords_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

static PyObject *
get_dtype(PyObject *numpy, const char *name)
{
    PyObject *dtype_type = PyObject_GetAttrString(numpy, "dtype");
    PyObject *dt;
    if (dtype_type == NULL) {
        return NULL;
    }
    dt = PyObject_CallFunction(dtype_type, "s", name);
    Py_DECREF(dtype_type);
    return dt;
}

PyMODINIT_FUNC
PyInit__crecords(void)
{
    PyObject *m, *numpy;

    if (PyType_Ready(&OwnedBuffer_Type) < 0 || PyType_Ready(&RecordsParser_Type) < 0) {
        return NULL;
    }
    crc32c_init();
    if (np_frombuffer == NULL) {
        numpy = PyImport_ImportModule("numpy");
        if (numpy == NULL) {
            return NULL;
        }
        np_frombuffer = PyObject_GetAttrString(numpy, "frombuffer");
        dt_int64 = get_dtype(numpy, "int64");
        dt_int32 = get_dtype(numpy, "int32");
        dt_int8 = get_dtype(numpy, "int8");
        dt_int16 = get_dtype(numpy, "int16");
        dt_uint32 = get_dtype(numpy, "uint32");
        dt_bool = get_dtype(numpy, "bool");
        Py_DECREF(numpy);
        if (np_frombuffer == NULL || dt_int64 == NULL || dt_int32 == NULL || dt_int8 == NULL ||
            dt_int16 == NULL || dt_uint32 == NULL || dt_bool == NULL) {
            Py_CLEAR(np_frombuffer);
            Py_CLEAR(dt_int64);
            Py_CLEAR(dt_int32);
            Py_CLEAR(dt_int8);
            Py_CLEAR(dt_int16);
            Py_CLEAR(dt_uint32);
            Py_CLEAR(dt_bool);
            return NULL;
        }
    }
    m = PyModule_Create(&crecords_module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "RecordsParser", (PyObject *)&RecordsParser_Type) < 0 ||
        PyModule_AddStringConstant(m, "IMPLEMENTATION", "c") < 0 ||
        PyModule_AddObjectRef(m, "CRC32C_HARDWARE", crc32c_have_hw ? Py_True : Py_False) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
