/*
 * kqlab.kafka._crecords -- C accelerator for kqlab.kafka._records_py.parse_records.
 *
 * The pure-Python module is the specification; this file implements exactly the same walk over
 * the records region of magic v2 batches (strict DefaultRecord.readFrom and partial
 * PartialDefaultRecord modes) and returns the 17 fields of ParsedRecords as a tuple.
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
};

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

/* At most 5 bytes; value bits above 32 are dropped (shift of the 5th group is 28). */
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
    int strict;
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

static int
databuf_init(DataBuf *d)
{
    d->obj = PyBytes_FromStringAndSize(NULL, INITIAL_DATA);
    if (d->obj == NULL) {
        return -1;
    }
    d->p = PyBytes_AS_STRING(d->obj);
    d->len = 0;
    d->cap = INITIAL_DATA;
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
 * Parse up to `count` (>= 0) records of buf[0:end] into o.  Structural problems are reported
 * through *err (kind 0 = none) and *n_out; the return value is an ST_* code for fatal problems
 * (memory, int32 offset overflow) that abort the whole call.
 */
static int
parse_batch(Out *o, const uint8_t *buf, Py_ssize_t end, int64_t count, int64_t *n_out,
            BatchErr *err)
{
    const int strict = o->strict;
    const int with_data = o->with_data;
    const int skip_kind = strict ? K_INVALID_STRUCTURE : K_SKIP_EOF;
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

    while (n < count) {
        int32_t size, offd, klen, vlen, hcount;
        int64_t tsd;
        uint8_t attr;
        Py_ssize_t start, kstart, vstart;
        Py_ssize_t i;
        int r;

        /* header entries appended from here on belong to this record (rolled back at fail) */
        save_hn = o->hn;
        save_hk = o->hkey.len;
        save_hv = o->hval.len;

        /* -- length prefix -- */
        r = rd32(buf, &pos, end, &size);
        if (UNLIKELY(r != V_OK)) {
            FAIL(r == V_UNDERFLOW ? K_PREMATURE_EOF : K_INVALID_STRUCTURE, 0, 0);
        }
        if (strict && (int64_t)size > (int64_t)(end - pos)) {
            FAIL(K_SIZE_EXCEEDS_REMAINING, size, end - pos);
        }
        start = pos;

        if (UNLIKELY(pos >= end)) {
            FAIL(K_INVALID_STRUCTURE, 0, 0);
        }
        attr = buf[pos++];
        if (UNLIKELY(rd64(buf, &pos, end, &tsd) != V_OK)) {
            FAIL(K_INVALID_STRUCTURE, 0, 0);
        }
        if (UNLIKELY(rd32(buf, &pos, end, &offd) != V_OK)) {
            FAIL(K_INVALID_STRUCTURE, 0, 0);
        }
        if (UNLIKELY(rd32(buf, &pos, end, &klen) != V_OK)) {
            FAIL(K_INVALID_STRUCTURE, 0, 0);
        }
        kstart = pos;
        if (klen >= 0) {
            if (UNLIKELY((Py_ssize_t)klen > end - pos)) {
                FAIL(skip_kind, 0, 0);
            }
            pos += klen;
        }
        if (UNLIKELY(rd32(buf, &pos, end, &vlen) != V_OK)) {
            FAIL(K_INVALID_STRUCTURE, 0, 0);
        }
        vstart = pos;
        if (vlen >= 0) {
            if (UNLIKELY((Py_ssize_t)vlen > end - pos)) {
                FAIL(skip_kind, 0, 0);
            }
            pos += vlen;
        }
        if (UNLIKELY(rd32(buf, &pos, end, &hcount) != V_OK)) {
            FAIL(K_INVALID_STRUCTURE, 0, 0);
        }
        if (UNLIKELY(hcount < 0)) {
            FAIL(K_NEGATIVE_HEADER_COUNT, hcount, 0);
        }
        if (strict && (Py_ssize_t)hcount > end - pos) {
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
                if (UNLIKELY(rd32(buf, &pos, end, &hklen) != V_OK)) {
                    FAIL(K_INVALID_STRUCTURE, 0, 0);
                }
                if (UNLIKELY(hklen < 0)) {
                    FAIL(K_NEGATIVE_HEADER_KEY, hklen, 0);
                }
                if (UNLIKELY((Py_ssize_t)hklen > end - pos)) {
                    FAIL(skip_kind, 0, 0);
                }
                hkstart = pos;
                pos += hklen;
                if (UNLIKELY(rd32(buf, &pos, end, &hvlen) != V_OK)) {
                    FAIL(K_INVALID_STRUCTURE, 0, 0);
                }
                hvstart = pos;
                if (hvlen >= 0) {
                    if (UNLIKELY((Py_ssize_t)hvlen > end - pos)) {
                        FAIL(skip_kind, 0, 0);
                    }
                    pos += hvlen;
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
        if (strict && (int64_t)(pos - start) != (int64_t)size) {
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
    return obj;
}

PyDoc_STRVAR(parse_records_doc,
"parse_records(regions, counts, strict=True, with_data=True) -> tuple\n"
"\n"
"C implementation of kqlab.kafka._records_py.parse_records; returns the fields of\n"
"ParsedRecords as a 17-tuple (see kqlab.kafka.records_parser).");

static PyObject *
parse_records(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"regions", "counts", "strict", "with_data", NULL};
    PyObject *regions_in, *counts_in;
    int strict = 1, with_data = 1;
    PyObject *regions = NULL, *counts = NULL, *errors = NULL, *result = NULL;
    PyObject *fields[17] = {NULL};
    int64_t *batch_n = NULL;
    Py_ssize_t nb, bi, k;
    Out o;

    memset(&o, 0, sizeof(o));
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|pp:parse_records", kwlist, &regions_in,
                                     &counts_in, &strict, &with_data)) {
        return NULL;
    }
    o.strict = strict;
    o.with_data = with_data;

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

    batch_n = PyMem_RawCalloc(nb > 0 ? (size_t)nb : 1u, sizeof(int64_t));
    if (batch_n == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    errors = PyList_New(nb);
    if (errors == NULL) {
        goto done;
    }
    if (grow_records(&o, INITIAL_RECORDS) != ST_OK) {
        PyErr_NoMemory();
        goto done;
    }
    if (with_data) {
        if (grow_headers(&o, INITIAL_HEADERS) != ST_OK) {
            PyErr_NoMemory();
            goto done;
        }
        o.koff[0] = 0;
        o.voff[0] = 0;
        o.hkoff[0] = 0;
        o.hvoff[0] = 0;
        if (databuf_init(&o.key) < 0 || databuf_init(&o.value) < 0 ||
            databuf_init(&o.hkey) < 0 || databuf_init(&o.hval) < 0) {
            goto done;
        }
    }

    for (bi = 0; bi < nb; bi++) {
        PyObject *count_obj = PyList_GET_ITEM(counts, bi);
        PyObject *err_obj;
        int overflow = 0;
        long long count = PyLong_AsLongLongAndOverflow(count_obj, &overflow);
        Py_buffer view;
        BatchErr err;
        int64_t n = 0;
        int st;

        if (count == -1 && overflow == 0 && PyErr_Occurred()) {
            goto done;
        }
        if (overflow < 0 || (overflow == 0 && count < 0)) {
            err_obj = Py_BuildValue("(iOi)", K_INVALID_COUNT, count_obj, 0);
            if (err_obj == NULL) {
                goto done;
            }
            PyList_SET_ITEM(errors, bi, err_obj);
            continue;
        }
        if (overflow > 0) {
            count = INT64_MAX; /* unreachable anyway: every record takes at least one byte */
        }

        if (PyObject_GetBuffer(PyList_GET_ITEM(regions, bi), &view, PyBUF_SIMPLE) < 0) {
            goto done;
        }
        if (view.len >= RELEASE_GIL_MIN_BYTES) {
            o.tstate = PyEval_SaveThread();
        }
        st = parse_batch(&o, (const uint8_t *)view.buf, view.len, (int64_t)count, &n, &err);
        if (o.tstate != NULL) {
            PyEval_RestoreThread(o.tstate);
            o.tstate = NULL;
        }
        PyBuffer_Release(&view);
        if (st != ST_OK) {
            if (st == ST_NOMEM) {
                PyErr_NoMemory();
            }
            else if (st == ST_OVERFLOW) {
                PyErr_SetString(PyExc_OverflowError,
                                "parse_records: a concatenated key/value/header data buffer "
                                "would exceed 2**31-1 bytes (int32 offsets); parse fewer "
                                "batches per call");
            }
            goto done;
        }
        batch_n[bi] = n;
        if (err.kind == 0) {
            err_obj = Py_NewRef(Py_None);
        }
        else {
            err_obj = Py_BuildValue("(iLL)", err.kind, (long long)err.a, (long long)err.b);
            if (err_obj == NULL) {
                goto done;
            }
        }
        PyList_SET_ITEM(errors, bi, err_obj);
    }

    /* -- assemble the 17 fields -- */
    fields[0] = wrap_array(batch_n, nb * (Py_ssize_t)sizeof(int64_t), dt_int64);
    batch_n = NULL;
    if (fields[0] == NULL) {
        goto done;
    }
    fields[1] = errors;
    errors = NULL;

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

    TAKE(2, o.ts, o.n, dt_int64);
    TAKE(3, o.offd, o.n, dt_int32);
    TAKE(4, o.attr, o.n, dt_int8);
    TAKE(5, o.klen, o.n, dt_int32);
    TAKE(6, o.vlen, o.n, dt_int32);
    TAKE(7, o.hcnt, o.n, dt_int32);
    if (with_data) {
        TAKE(8, o.koff, o.n + 1, dt_int32);
        if ((fields[9] = finish_databuf(&o.key)) == NULL) {
            goto done;
        }
        TAKE(10, o.voff, o.n + 1, dt_int32);
        if ((fields[11] = finish_databuf(&o.value)) == NULL) {
            goto done;
        }
        TAKE(12, o.hkoff, o.hn + 1, dt_int32);
        if ((fields[13] = finish_databuf(&o.hkey)) == NULL) {
            goto done;
        }
        TAKE(14, o.hvoff, o.hn + 1, dt_int32);
        if ((fields[15] = finish_databuf(&o.hval)) == NULL) {
            goto done;
        }
        TAKE(16, o.hvlen, o.hn, dt_int32);
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
    PyMem_RawFree(batch_n);
    out_free(&o);
    Py_XDECREF(errors);
    Py_XDECREF(regions);
    Py_XDECREF(counts);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* module                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static PyMethodDef crecords_methods[] = {
    {"parse_records", (PyCFunction)(void (*)(void))parse_records, METH_VARARGS | METH_KEYWORDS,
     parse_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef crecords_module = {
    PyModuleDef_HEAD_INIT,
    "kqlab.kafka._crecords",
    "C accelerator for kqlab.kafka._records_py.parse_records.",
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

    if (PyType_Ready(&OwnedBuffer_Type) < 0) {
        return NULL;
    }
    if (np_frombuffer == NULL) {
        numpy = PyImport_ImportModule("numpy");
        if (numpy == NULL) {
            return NULL;
        }
        np_frombuffer = PyObject_GetAttrString(numpy, "frombuffer");
        dt_int64 = get_dtype(numpy, "int64");
        dt_int32 = get_dtype(numpy, "int32");
        dt_int8 = get_dtype(numpy, "int8");
        Py_DECREF(numpy);
        if (np_frombuffer == NULL || dt_int64 == NULL || dt_int32 == NULL || dt_int8 == NULL) {
            Py_CLEAR(np_frombuffer);
            Py_CLEAR(dt_int64);
            Py_CLEAR(dt_int32);
            Py_CLEAR(dt_int8);
            return NULL;
        }
    }
    m = PyModule_Create(&crecords_module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "IMPLEMENTATION", "c") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
