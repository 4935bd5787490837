/* Optional C accelerator for kafkastate.core.protocol.records.
 *
 * Theory of operation
 * -------------------
 * records.py is the reference; this module only speeds up its per-record loops and must give
 * the same results. Where the two could differ (messages of errors, the order in which two
 * faults are noticed) the outcome is still the same: a record section either decodes to equal
 * Record tuples or fails with CorruptRecordError.
 *
 * parse_records() is records._parse_records(): it walks `count` magic 2 records (protocol guide,
 * "Record") in buf[pos:end] and returns a list of Record named tuples. Every read is checked
 * against `end`, so no input can make it read outside the buffer. Malformed input raises the
 * exception class handed to setup() (records._Malformed), or UnicodeDecodeError for a header
 * key that is not UTF-8; records.py turns both into CorruptRecordError with the batch offset.
 *
 * Two reference quirks are kept on purpose: varints are read with the same byte limits (5 for
 * varint, 10 for varlong) and an out-of-range 10-byte timestamp delta or an int64 overflow of
 * base + delta produces a Python int beyond int64, exactly as the Python arithmetic does.
 *
 * append_record() is the per-record body of RecordBatchBuilder.append(): it appends the same
 * four parts (length prefix, head, the value by reference, headers) to the builder's list and
 * returns their size. Input whose meaning Python defines by iteration or by arbitrary-size
 * arithmetic (headers that are not a list or tuple of 2-tuples, deltas beyond int64) is handed
 * back (None) to the Python code, so both paths write the same bytes and raise the same errors.
 *
 * append_records() is append_record() over a list of records, for the bulk appends (a producer's
 * send_batch); it stops at the first record it would not take exactly as append_record() does.
 *
 * murmur2() is partitioner.murmur2, the keyed producer's per-record hash (Java's Utils.murmur2).
 *
 * consumer_records() is the per-record loop of the adapters' to_consumer_records() without
 * deserializers: it turns Record tuples into the 13-field ConsumerRecord tuples.
 *
 * Records are built as tuple.__new__(Record, ...) builds them (tp_alloc, then the six items);
 * from CPython 3.14, whose tuples cache their hash, through the public tuple constructor.
 *
 * Pure: no IO, no clock, no global state beyond the classes setup() stores and a cached b"\x00".
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

/* records.Record, a tuple subclass; records._Malformed, an Exception subclass. */
static PyTypeObject *record_type = NULL;
static PyObject *malformed = NULL;

/* The smallest encodings, to bound what a declared count makes us allocate: a record is
 * length, attributes, timestamp delta, offset delta, key length, value length and header count,
 * one byte each; a header is key length and value length. */
#define MIN_RECORD_SIZE 7
#define MIN_HEADER_SIZE 2

#define DATA_ENDS "data ends inside a record"

static int
data_ends(void)
{
    PyErr_SetString(malformed, DATA_ENDS);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* varints (protocol guide, "Record": zigzag-encoded, as in protobuf)                          */

/* The raw (still zigzagged) varint of at most max_bytes (<= 10) bytes at buf[*pos], reading
 * no further than `end`. Bits 0..63 go to *lo, bits 64..69 (only a 10th byte has them) to *hi
 * when hi is not NULL. Same limit check as records._read_uvarint, made before each byte. */
static int
read_uvarint_slow(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, int max_bytes,
                  uint64_t *lo, uint64_t *hi)
{
    uint64_t result = 0;
    uint64_t high = 0;
    Py_ssize_t p = *pos;
    for (int i = 0;; i++) {
        if (i >= max_bytes) {
            PyErr_Format(malformed, "varint longer than %d bytes", max_bytes);
            return -1;
        }
        if (p >= end) {
            return data_ends();
        }
        unsigned int b = buf[p++];
        uint64_t bits = b & 0x7F;
        int shift = 7 * i;
        result |= bits << shift; /* shift <= 63: the high bits of a 10th byte fall off here */
        if (shift == 63) {
            high = bits >> 1;    /* ... and are kept here */
        }
        if (b < 0x80) {
            *lo = result;
            if (hi != NULL) {
                *hi = high;
            }
            *pos = p;
            return 0;
        }
    }
}

/* A varint of at most 5 bytes (lengths, offset delta, counts): fast path for one byte. */
static inline int
read_uvarint5(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out)
{
    Py_ssize_t p = *pos;
    if (p < end && buf[p] < 0x80) {
        *out = buf[p];
        *pos = p + 1;
        return 0;
    }
    return read_uvarint_slow(buf, pos, end, 5, out, NULL);
}

/* Zigzag decode of a raw value below 2**64. */
static inline int64_t
unzigzag(uint64_t z)
{
    return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
}

/* a + b as a Python int, exact even when the sum leaves int64 (then via Python arithmetic). */
static PyObject *
add_to_long(int64_t a, int64_t b)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) {
        PyObject *pa = PyLong_FromLongLong(a);
        PyObject *pb = PyLong_FromLongLong(b);
        PyObject *sum = NULL;
        if (pa != NULL && pb != NULL) {
            sum = PyNumber_Add(pa, pb);
        }
        Py_XDECREF(pa);
        Py_XDECREF(pb);
        return sum;
    }
    return PyLong_FromLongLong(a + b);
}

/* base + unzigzag(raw) where raw = hi * 2**64 + lo does not fit 64 bits (a 10-byte varlong
 * whose last byte exceeds 1): the reference computes it with Python ints, and so do we. */
static PyObject *
add_big_zigzag(int64_t base, uint64_t lo, uint64_t hi)
{
    /* unzigzag(raw) = raw >> 1 if raw is even, else ~(raw >> 1) */
    uint64_t half_lo = (lo >> 1) | (hi << 63);
    uint64_t half_hi = hi >> 1;
    PyObject *h = NULL, *shift = NULL, *shifted = NULL, *l = NULL, *half = NULL;
    PyObject *delta = NULL, *pbase = NULL, *sum = NULL;
    if ((h = PyLong_FromUnsignedLongLong(half_hi)) == NULL ||
        (shift = PyLong_FromLong(64)) == NULL ||
        (shifted = PyNumber_Lshift(h, shift)) == NULL ||
        (l = PyLong_FromUnsignedLongLong(half_lo)) == NULL ||
        (half = PyNumber_Or(shifted, l)) == NULL) {
        goto done;
    }
    if (lo & 1) {
        delta = PyNumber_Invert(half);
    }
    else {
        delta = half;
        Py_INCREF(delta);
    }
    if (delta == NULL || (pbase = PyLong_FromLongLong(base)) == NULL) {
        goto done;
    }
    sum = PyNumber_Add(pbase, delta);
done:
    Py_XDECREF(h);
    Py_XDECREF(shift);
    Py_XDECREF(shifted);
    Py_XDECREF(l);
    Py_XDECREF(half);
    Py_XDECREF(delta);
    Py_XDECREF(pbase);
    return sum;
}

/* ------------------------------------------------------------------------------------------ */
/* decoding                                                                                    */

/* A key, value or header value: `raw` is the zigzagged length already read. -1 is null
 * (Py_None, a new reference); other negative lengths raise naming `what`. */
static PyObject *
read_bytes_field(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, uint64_t raw,
                 const char *what)
{
    if (raw & 1) {
        if (raw != 1) {
            PyErr_Format(malformed, "negative %s length %lld", what, (long long)unzigzag(raw));
            return NULL;
        }
        Py_RETURN_NONE;
    }
    uint64_t n = raw >> 1;
    if (n > (uint64_t)(end - *pos)) {
        data_ends();
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)buf + *pos, (Py_ssize_t)n);
    if (out != NULL) {
        *pos += (Py_ssize_t)n;
    }
    return out;
}

/* The header array after the header count varint at buf[*pos] (records._parse_headers). */
static PyObject *
parse_headers(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end)
{
    uint64_t raw;
    if (read_uvarint5(buf, pos, end, &raw) < 0) {
        return NULL;
    }
    int64_t count = unzigzag(raw);
    if (count < 0) {
        PyErr_Format(malformed, "negative header count %lld", (long long)count);
        return NULL;
    }
    /* More headers than the bytes left can hold fail inside the loop, after at most `cap`
     * of them, with the reference's message for the first bad field: no need to allocate
     * for the declared count. */
    Py_ssize_t cap = (end - *pos) / MIN_HEADER_SIZE + 1;
    if (count < cap) {
        cap = (Py_ssize_t)count;
    }
    PyObject *headers = PyTuple_New(cap);
    if (headers == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        if (i >= cap) { /* unreachable: each header takes MIN_HEADER_SIZE bytes or fails */
            data_ends();
            goto error;
        }
        if (read_uvarint5(buf, pos, end, &raw) < 0) {
            goto error;
        }
        int64_t klen = unzigzag(raw);
        if (klen < 0) {
            PyErr_Format(malformed, "negative header key length %lld", (long long)klen);
            goto error;
        }
        if (klen > end - *pos) {
            data_ends();
            goto error;
        }
        /* strict UTF-8, as bytes.decode(): UnicodeDecodeError on bad input */
        PyObject *hkey = PyUnicode_DecodeUTF8((const char *)buf + *pos, (Py_ssize_t)klen, NULL);
        if (hkey == NULL) {
            goto error;
        }
        *pos += (Py_ssize_t)klen;
        PyObject *hvalue = NULL;
        if (read_uvarint5(buf, pos, end, &raw) == 0) {
            hvalue = read_bytes_field(buf, pos, end, raw, "header value");
        }
        if (hvalue == NULL) {
            Py_DECREF(hkey);
            goto error;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(hkey);
            Py_DECREF(hvalue);
            goto error;
        }
        PyTuple_SET_ITEM(pair, 0, hkey);
        PyTuple_SET_ITEM(pair, 1, hvalue);
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
error:
    Py_DECREF(headers); /* unset items are NULL, which tuple deallocation skips */
    return NULL;
}

/* An instance of the tuple subclass `type` from n new references (stolen, also on failure). */
static PyObject *
new_tuple_of(PyTypeObject *type, PyObject **items, Py_ssize_t n)
{
#if PY_VERSION_HEX < 0x030E0000 && !defined(KAFKASTATE_GENERIC_RECORD_NEW)
    /* What tuple.__new__(type, items) does (tuple_subtype_new), without the intermediate
     * tuple. From 3.14 a tuple caches its hash in a field tp_alloc leaves at 0, so there we take
     * the public route below (-DKAFKASTATE_GENERIC_RECORD_NEW forces it, to test it). */
    PyObject *rec = type->tp_alloc(type, n);
    if (rec == NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_DECREF(items[i]);
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(rec, i, items[i]);
    }
    return rec;
#else
    PyObject *plain = PyTuple_New(n);
    if (plain == NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_DECREF(items[i]);
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(plain, i, items[i]);
    }
    PyObject *args = PyTuple_Pack(1, plain);
    Py_DECREF(plain);
    if (args == NULL) {
        return NULL;
    }
    PyObject *rec = PyTuple_Type.tp_new(type, args, NULL);
    Py_DECREF(args);
    return rec;
#endif
}

/* A Record from six new references (stolen, also on failure). */
static PyObject *
new_record(PyObject *items[6])
{
    return new_tuple_of(record_type, items, 6);
}

#define CONSUMER_RECORD_FIELDS 13

/* The size fields of a consumer record: len(obj) of a key or value, -1 for None. */
static PyObject *
size_of(PyObject *obj)
{
    if (obj == Py_None) {
        return PyLong_FromLong(-1);
    }
    Py_ssize_t n = PyObject_Length(obj);
    return n < 0 ? NULL : PyLong_FromSsize_t(n);
}

/* sum(len(key) + len(value)) over a headers tuple of (str, bytes | None) pairs, -1 for none;
 * sets *atomic to 0 when there are headers (the record then holds containers). */
static PyObject *
header_size_of(PyObject *headers, int *atomic)
{
    if (!PyTuple_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "a Record's headers must be a tuple");
        return NULL;
    }
    Py_ssize_t nh = PyTuple_GET_SIZE(headers);
    if (nh == 0) {
        return PyLong_FromLong(-1);
    }
    *atomic = 0;
    Py_ssize_t total = 0;
    for (Py_ssize_t h = 0; h < nh; h++) {
        PyObject *pair = PyTuple_GET_ITEM(headers, h);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a header must be a (key, value) tuple");
            return NULL;
        }
        Py_ssize_t klen = PyObject_Length(PyTuple_GET_ITEM(pair, 0));
        if (klen < 0) {
            return NULL;
        }
        total += klen;
        PyObject *hv = PyTuple_GET_ITEM(pair, 1);
        if (hv != Py_None) {
            Py_ssize_t vlen = PyObject_Length(hv);
            if (vlen < 0) {
                return NULL;
            }
            total += vlen;
        }
    }
    return PyLong_FromSsize_t(total);
}

/* A consumer record of `type` from a Record's six new references (stolen, also on failure),
 * the run's topic, partition and leader epoch and the int of the timestamp type (borrowed):
 * (topic, partition, leader_epoch, offset, timestamp, int(timestamp_type), key, value,
 * headers, None, key size, value size, header size). Without headers it holds only atomic
 * objects and is untracked by the cyclic GC, as CPython does for such tuples. */
static PyObject *
new_consumer_record(PyTypeObject *type, PyObject *record[6], PyObject *topic,
                    PyObject *partition, PyObject *epoch, PyObject *ts_int)
{
    PyObject *items[CONSUMER_RECORD_FIELDS];
    int atomic = 1;
    items[0] = Py_NewRef(topic);
    items[1] = Py_NewRef(partition);
    items[2] = Py_NewRef(epoch);
    items[3] = record[0];
    items[4] = record[1];
    items[5] = Py_NewRef(ts_int);
    Py_DECREF(record[2]); /* the TimestampType: its int takes its place */
    items[6] = record[3];
    items[7] = record[4];
    items[8] = record[5];
    items[9] = Py_NewRef(Py_None);
    items[10] = size_of(record[3]);
    items[11] = items[10] == NULL ? NULL : size_of(record[4]);
    items[12] = items[11] == NULL ? NULL : header_size_of(record[5], &atomic);
    if (items[12] == NULL) {
        for (int f = 0; f < CONSUMER_RECORD_FIELDS; f++) {
            Py_XDECREF(items[f]);
        }
        return NULL;
    }
    PyObject *rec = new_tuple_of(type, items, CONSUMER_RECORD_FIELDS);
    if (rec != NULL && atomic && PyObject_GC_IsTracked(rec)) {
        PyObject_GC_UnTrack(rec);
    }
    return rec;
}

static int
as_ssize(PyObject *obj, Py_ssize_t *out)
{
    *out = PyLong_AsSsize_t(obj);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
as_int64(PyObject *obj, int64_t *out)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

PyDoc_STRVAR(parse_records_doc,
"parse_records(buf, pos, end, count, base_offset, base_ts, ts_type, append_ts,\n"
"              [cls, topic, partition, leader_epoch], /)\n"
"--\n"
"\n"
"Decode `count` magic 2 records from buf[pos:end] into a list of Record tuples.\n"
"\n"
"Same arguments and results as records._parse_records (passed positionally); malformed\n"
"input raises the exception class given to setup(), or UnicodeDecodeError. With the four\n"
"last arguments, each record is decoded straight into a `cls` tuple of the consumer-record\n"
"layout instead (what consumer_records() would make of the Record): one tuple per record.");

static PyObject *
parse_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8 && nargs != 12) {
        PyErr_Format(PyExc_TypeError, "parse_records() takes 8 or 12 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    /* consumer-record mode: the class and the three fields every record of the run shares */
    PyTypeObject *consumer_type = NULL;
    PyObject *topic = NULL, *partition = NULL, *epoch = NULL, *ts_int = NULL;
    if (nargs == 12) {
        PyObject *cls = args[8];
        if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
            PyErr_SetString(PyExc_TypeError, "parse_records() needs a tuple subclass");
            return NULL;
        }
        consumer_type = (PyTypeObject *)cls;
        topic = args[9];
        partition = args[10];
        epoch = args[11];
    }
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups.setup() was not called");
        return NULL;
    }
    PyObject *bufobj = args[0];
    if (!PyBytes_Check(bufobj)) {
        PyErr_Format(PyExc_TypeError, "parse_records() needs bytes, not %.100s",
                     Py_TYPE(bufobj)->tp_name);
        return NULL;
    }
    Py_ssize_t pos, end, count;
    int64_t base_offset, base_ts;
    if (as_ssize(args[1], &pos) < 0 || as_ssize(args[2], &end) < 0 ||
        as_ssize(args[3], &count) < 0 || as_int64(args[4], &base_offset) < 0 ||
        as_int64(args[5], &base_ts) < 0) {
        return NULL;
    }
    PyObject *ts_type = args[6];
    PyObject *append_ts = args[7] == Py_None ? NULL : args[7];
    if (consumer_type != NULL && (ts_int = PyNumber_Long(ts_type)) == NULL) { /* IntEnum */
        return NULL;
    }
    if (pos < 0 || pos > end || end > PyBytes_GET_SIZE(bufobj)) {
        PyErr_Format(PyExc_ValueError, "bad record section bounds %zd..%zd of %zd bytes", pos,
                     end, PyBytes_GET_SIZE(bufobj));
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(bufobj);
    if (count < 0) {
        count = 0; /* range(count) is empty: only the end-of-batch check remains */
    }
    /* As for headers: a count the bytes cannot hold fails inside the loop, so allocate for
     * no more records than fit, plus the one that fails. */
    Py_ssize_t cap = (end - pos) / MIN_RECORD_SIZE + 1;
    if (count < cap) {
        cap = count;
    }
    PyObject *out = PyList_New(cap);
    if (out == NULL) {
        Py_XDECREF(ts_int);
        return NULL;
    }
    /* Records of one batch often share a timestamp: reuse the last int object. */
    PyObject *last_ts = NULL;
    int64_t last_ts_value = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *items[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
        uint64_t rec_len, raw, hi;
        if (i >= cap) { /* unreachable: each record takes MIN_RECORD_SIZE bytes or fails */
            data_ends();
            goto error;
        }
        /* length, kept zigzagged: compared doubled against the bytes consumed */
        if (read_uvarint5(buf, &pos, end, &rec_len) < 0) {
            goto error;
        }
        Py_ssize_t start = pos;
        /* attributes (unused, skipped), timestampDelta (varlong) */
        if (end - pos < 2) {
            data_ends();
            goto error;
        }
        pos += 1;
        if (buf[pos] < 0x80) {
            raw = buf[pos++];
            hi = 0;
        }
        else if (read_uvarint_slow(buf, &pos, end, 10, &raw, &hi) < 0) {
            goto error;
        }
        if (append_ts != NULL) {
            Py_INCREF(append_ts);
            items[1] = append_ts;
        }
        else if (hi != 0) {
            if ((items[1] = add_big_zigzag(base_ts, raw, hi)) == NULL) {
                goto error_items;
            }
        }
        else {
            int64_t delta = unzigzag(raw);
            if (last_ts != NULL && delta == last_ts_value) {
                Py_INCREF(last_ts);
                items[1] = last_ts;
            }
            else {
                if ((items[1] = add_to_long(base_ts, delta)) == NULL) {
                    goto error_items;
                }
                Py_XDECREF(last_ts);
                Py_INCREF(items[1]);
                last_ts = items[1];
                last_ts_value = delta;
            }
        }
        /* offsetDelta */
        if (read_uvarint5(buf, &pos, end, &raw) < 0) {
            goto error_items;
        }
        if ((items[0] = add_to_long(base_offset, unzigzag(raw))) == NULL) {
            goto error_items;
        }
        Py_INCREF(ts_type);
        items[2] = ts_type;
        /* key, value: -1 (zigzag 1) is null */
        if (read_uvarint5(buf, &pos, end, &raw) < 0 ||
            (items[3] = read_bytes_field(buf, &pos, end, raw, "key")) == NULL) {
            goto error_items;
        }
        if (read_uvarint5(buf, &pos, end, &raw) < 0 ||
            (items[4] = read_bytes_field(buf, &pos, end, raw, "value")) == NULL) {
            goto error_items;
        }
        /* headers */
        if (pos < end && buf[pos] == 0) {
            items[5] = PyTuple_New(0); /* the shared empty tuple */
            pos += 1;
        }
        else {
            items[5] = parse_headers(buf, &pos, end);
        }
        if (items[5] == NULL) {
            goto error_items;
        }
        if (((uint64_t)(pos - start) << 1) != rec_len) {
            PyErr_Format(malformed, "record at offset %S does not match its length", items[0]);
            goto error_items;
        }
        PyObject *rec = consumer_type == NULL
                            ? new_record(items)
                            : new_consumer_record(consumer_type, items, topic, partition, epoch,
                                                  ts_int);
        if (rec == NULL) {
            goto error;
        }
        PyList_SET_ITEM(out, i, rec);
        continue;
    error_items:
        for (int k = 0; k < 6; k++) {
            Py_XDECREF(items[k]);
        }
        goto error;
    }
    Py_XDECREF(last_ts);
    Py_XDECREF(ts_int);
    if (pos != end) {
        PyErr_Format(malformed, "the declared %zd records do not end where the batch does",
                     count);
        Py_DECREF(out);
        return NULL;
    }
    return out;
error:
    Py_XDECREF(last_ts);
    Py_XDECREF(ts_int);
    Py_DECREF(out); /* unset items are NULL, which list deallocation skips */
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* encoding                                                                                    */

/* Cached b"\x00": the header count of a record without headers, the common tail. */
static PyObject *no_headers_tail = NULL;

static inline uint64_t
zigzag(int64_t n)
{
    uint64_t u = (uint64_t)n << 1;
    return n < 0 ? ~u : u;
}

static inline Py_ssize_t
uvarint_size(uint64_t z)
{
    Py_ssize_t size = 1;
    while (z >= 0x80) {
        z >>= 7;
        size++;
    }
    return size;
}

static inline unsigned char *
put_uvarint(unsigned char *p, uint64_t z)
{
    while (z >= 0x80) {
        *p++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

/* A bytes-like argument (key or header value), or Py_None: view->obj is NULL for None. */
static int
get_bytes_like(PyObject *obj, Py_buffer *view)
{
    if (obj == Py_None) {
        view->obj = NULL;
        view->len = 0;
        view->buf = NULL;
        return 0;
    }
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

#define NOT_HANDLED 1 /* encode_headers: leave this record to the Python code */

/* Headers encoded on the stack up to this many; more take a heap array. */
#define STACK_HEADERS 8

/* The header array of one record as a new bytes object in *out. Returns 0, -1 with an
 * exception (TypeError/ValueError for a bad argument), or NOT_HANDLED for input shapes the
 * Python code defines by iteration (headers neither list nor tuple, pairs not 2-tuples). */
static int
encode_headers(PyObject *headers, PyObject **out)
{
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers)) {
        return NOT_HANDLED;
    }
    /* A tuple of pairs cannot change; a list could (a buffer export may run Python code from
     * 3.12 on, PEP 688), so work on a tuple copy that also keeps every pair alive. */
    PyObject *pairs = PySequence_Tuple(headers);
    if (pairs == NULL) {
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(pairs);
    struct header {
        const char *kdata;
        Py_ssize_t klen;
        Py_buffer value; /* value.obj is NULL for a null value */
    } stack[STACK_HEADERS];
    struct header *hs = stack;
    if (n > STACK_HEADERS) {
        hs = PyMem_Calloc((size_t)n, sizeof(struct header));
        if (hs == NULL) {
            Py_DECREF(pairs);
            PyErr_NoMemory();
            return -1;
        }
    }
    Py_ssize_t got = 0; /* hs[0:got] may hold buffers to release */
    int rc = -1;
    Py_ssize_t size = uvarint_size(zigzag(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            rc = NOT_HANDLED;
            goto done;
        }
        PyObject *hkey = PyTuple_GET_ITEM(pair, 0);
        if (!PyUnicode_Check(hkey)) {
            PyErr_Format(PyExc_TypeError, "header key must be str, not %.100s",
                         Py_TYPE(hkey)->tp_name);
            goto done;
        }
        /* UTF-8, strict like str.encode(): UnicodeEncodeError for a lone surrogate */
        hs[i].kdata = PyUnicode_AsUTF8AndSize(hkey, &hs[i].klen);
        if (hs[i].kdata == NULL) {
            goto done;
        }
        if (get_bytes_like(PyTuple_GET_ITEM(pair, 1), &hs[i].value) < 0) {
            if (PyErr_ExceptionMatches(PyExc_BufferError)) {
                /* not contiguous: records.py copies it with bytes(), so let it */
                PyErr_Clear();
                rc = NOT_HANDLED;
            }
            goto done;
        }
        got = i + 1;
        size += uvarint_size(zigzag(hs[i].klen)) + hs[i].klen;
        if (hs[i].value.obj == NULL) {
            size += 1;
        }
        else {
            size += uvarint_size(zigzag(hs[i].value.len)) + hs[i].value.len;
        }
    }
    *out = PyBytes_FromStringAndSize(NULL, size);
    if (*out == NULL) {
        goto done;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(*out);
    p = put_uvarint(p, zigzag(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        p = put_uvarint(p, zigzag(hs[i].klen));
        memcpy(p, hs[i].kdata, (size_t)hs[i].klen);
        p += hs[i].klen;
        if (hs[i].value.obj == NULL) {
            *p++ = 1; /* zigzag(-1): null */
        }
        else {
            p = put_uvarint(p, zigzag(hs[i].value.len));
            memcpy(p, hs[i].value.buf, (size_t)hs[i].value.len);
            p += hs[i].value.len;
        }
    }
    rc = 0;
done:
    for (Py_ssize_t i = 0; i < got; i++) {
        if (hs[i].value.obj != NULL) {
            PyBuffer_Release(&hs[i].value);
        }
    }
    if (hs != stack) {
        PyMem_Free(hs);
    }
    Py_DECREF(pairs);
    return rc;
}

static Py_ssize_t encode_record(PyObject *parts, long long od, long long tsd, PyObject *key,
                                PyObject *value, PyObject *headers);

PyDoc_STRVAR(append_record_doc,
"append_record(parts, offset_delta, timestamp_delta, key, value, headers, /)\n"
"--\n"
"\n"
"Encode one magic 2 record onto `parts` as RecordBatchBuilder.append does: four items,\n"
"length prefix, head (attributes .. value length), the value itself (referenced, not\n"
"copied) and the headers. Returns the bytes added, or None (nothing appended) for input the\n"
"Python code must handle: deltas beyond int64, headers that are not a list or tuple of\n"
"2-tuples. Raises TypeError or ValueError for an argument of the wrong type.");

static PyObject *
append_record(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "append_record() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *parts = args[0];
    if (!PyList_CheckExact(parts)) {
        PyErr_SetString(PyExc_TypeError, "append_record() needs a list of parts");
        return NULL;
    }
    int overflow;
    long long od = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (od == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow) {
        Py_RETURN_NONE;
    }
    long long tsd = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (tsd == -1 && PyErr_Occurred()) {
        return NULL; /* a float timestamp: TypeError, as in Python */
    }
    if (overflow) {
        Py_RETURN_NONE;
    }
    Py_ssize_t added = encode_record(parts, od, tsd, args[3], args[4], args[5]);
    if (added == -1) {
        return NULL;
    }
    if (added == -2) {
        Py_RETURN_NONE;
    }
    return PyLong_FromSsize_t(added);
}

/* The body of append_record(): the record's four parts onto `parts` (unchanged on an error).
 * Returns the bytes added, -1 with an exception, or -2 for input left to the Python code. */
static Py_ssize_t
encode_record(PyObject *parts, long long od, long long tsd, PyObject *key, PyObject *value,
              PyObject *headers)
{
    /* value: only its len() now, referenced until build() joins it (records.py does the same,
     * so a value that is not bytes-like is refused there, not here) */
    Py_ssize_t vlen = 0;
    if (value != Py_None && (vlen = PyObject_Size(value)) < 0) {
        return -1;
    }
    PyObject *tail = NULL;
    int has_headers = PyObject_IsTrue(headers); /* `if headers`: None and () mean none */
    if (has_headers < 0) {
        return -1;
    }
    if (has_headers) {
        int rc = encode_headers(headers, &tail);
        if (rc < 0) {
            return -1;
        }
        if (rc == NOT_HANDLED) {
            return -2;
        }
    }
    else {
        tail = no_headers_tail;
        Py_INCREF(tail);
    }
    Py_buffer kview;
    if (get_bytes_like(key, &kview) < 0) {
        Py_DECREF(tail);
        return -1;
    }
    /* head: attributes int8 (0), timestampDelta varlong, offsetDelta varint, key length and
     * key, value length (protocol guide, "Record") */
    uint64_t ztsd = zigzag(tsd);
    uint64_t zod = zigzag(od);
    Py_ssize_t head_len = 1 + uvarint_size(ztsd) + uvarint_size(zod);
    head_len += kview.obj == NULL ? 1 : uvarint_size(zigzag(kview.len)) + kview.len;
    head_len += value == Py_None ? 1 : uvarint_size(zigzag(vlen));
    PyObject *head = PyBytes_FromStringAndSize(NULL, head_len);
    if (head == NULL) {
        goto fail;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(head);
    *p++ = 0;
    p = put_uvarint(p, ztsd);
    p = put_uvarint(p, zod);
    if (kview.obj == NULL) {
        *p++ = 1;
    }
    else {
        p = put_uvarint(p, zigzag(kview.len));
        memcpy(p, kview.buf, (size_t)kview.len);
        p += kview.len;
    }
    if (value == Py_None) {
        *p++ = 1;
    }
    else {
        put_uvarint(p, zigzag(vlen));
    }
    if (kview.obj != NULL) {
        PyBuffer_Release(&kview);
        kview.obj = NULL;
    }
    Py_ssize_t body = head_len + vlen + PyBytes_GET_SIZE(tail);
    unsigned char pbuf[10];
    Py_ssize_t plen = put_uvarint(pbuf, zigzag(body)) - pbuf;
    PyObject *prefix = PyBytes_FromStringAndSize((const char *)pbuf, plen);
    if (prefix == NULL) {
        goto fail;
    }
    /* records.py appends value b"" for a null value: join then needs no special case */
    PyObject *vpart = value == Py_None ? PyBytes_FromStringAndSize(NULL, 0) : value;
    if (value != Py_None) {
        Py_INCREF(vpart);
    }
    Py_ssize_t n = PyList_GET_SIZE(parts);
    if (vpart == NULL || PyList_Append(parts, prefix) < 0 || PyList_Append(parts, head) < 0 ||
        PyList_Append(parts, vpart) < 0 || PyList_Append(parts, tail) < 0) {
        /* leave the builder unchanged */
        PyList_SetSlice(parts, n, PyList_GET_SIZE(parts), NULL);
        Py_DECREF(prefix);
        Py_XDECREF(vpart);
        goto fail;
    }
    Py_DECREF(prefix);
    Py_DECREF(head);
    Py_DECREF(vpart);
    Py_DECREF(tail);
    return plen + body;
fail:
    if (kview.obj != NULL) {
        PyBuffer_Release(&kview);
    }
    Py_XDECREF(head);
    Py_DECREF(tail);
    return -1;
}

PyDoc_STRVAR(append_records_doc,
"append_records(parts, offset_delta, base_ts, max_ts, records, start, /)\n"
"--\n"
"\n"
"append_record() over records[start:], a list of (timestamp_ms, key, value, headers)\n"
"tuples, at offset deltas offset_delta, offset_delta + 1...: the bulk appends' loop. It\n"
"stops at the first record that is not a 4-tuple of an int timestamp in 0..2**63-1, bytes\n"
"or None key and value and headers append_record() takes, leaving it to the Python code.\n"
"Returns (stop, bytes added, the largest timestamp, max_ts included). All or nothing: on an\n"
"error `parts` is as it was.");

static PyObject *
append_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    /* (parts, offset_delta, base_ts, max_ts, records, start): two lists, four ints */
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[4])) {
        PyErr_Format(PyExc_TypeError,
                     "append_records() takes 6 arguments, parts and records lists (%zd given)",
                     nargs);
        return NULL;
    }
    PyObject *parts = args[0];
    PyObject *records = args[4];
    long long od = PyLong_AsLongLong(args[1]);
    long long base_ts = PyLong_AsLongLong(args[2]);
    long long max_ts = PyLong_AsLongLong(args[3]);
    Py_ssize_t start = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (base_ts < 0 || od < 0 || start < 0) {
        PyErr_SetString(PyExc_ValueError, "append_records() needs non-negative deltas");
        return NULL;
    }
    Py_ssize_t entry = PyList_GET_SIZE(parts);
    Py_ssize_t added = 0;
    Py_ssize_t i = start;
    for (; i < PyList_GET_SIZE(records); i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 4) {
            break;
        }
        PyObject *ts_obj = PyTuple_GET_ITEM(rec, 0);
        PyObject *key = PyTuple_GET_ITEM(rec, 1);
        PyObject *value = PyTuple_GET_ITEM(rec, 2);
        if (!PyLong_CheckExact(ts_obj) || (key != Py_None && !PyBytes_CheckExact(key)) ||
            (value != Py_None && !PyBytes_CheckExact(value))) {
            break;
        }
        int overflow;
        long long ts = PyLong_AsLongLongAndOverflow(ts_obj, &overflow);
        if (overflow || ts < 0) {
            break; /* (no error: an exact int cannot fail otherwise) */
        }
        Py_INCREF(rec); /* keeps the items alive whatever encoding runs */
        Py_ssize_t size =
            encode_record(parts, od + (i - start), ts - base_ts, key, value,
                          PyTuple_GET_ITEM(rec, 3));
        Py_DECREF(rec);
        if (size == -1) {
            PyList_SetSlice(parts, entry, PyList_GET_SIZE(parts), NULL);
            return NULL;
        }
        if (size == -2) {
            break;
        }
        added += size;
        if (ts > max_ts) {
            max_ts = ts;
        }
    }
    return Py_BuildValue("nnL", i, added, max_ts);
}

/* ------------------------------------------------------------------------------------------ */
/* murmur2                                                                                      */

PyDoc_STRVAR(murmur2_doc,
"murmur2(data, /)\n--\n\n"
"partitioner.murmur2 (the Java client's Utils.murmur2) of a bytes-like object: the hash as\n"
"a signed 32-bit int. The keyed producer's per-record partition choice.");

static int32_t
murmur2_of(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t words = length >> 2;
    for (Py_ssize_t i = 0; i < words; i++) {
        /* Java reads each 4-byte group little-endian */
        const unsigned char *w = data + 4 * i;
        uint32_t k = (uint32_t)w[0] | ((uint32_t)w[1] << 8) | ((uint32_t)w[2] << 16) |
                     ((uint32_t)w[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t base = words << 2;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[base + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[base + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[base];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *
murmur2(PyObject *Py_UNUSED(module), PyObject *data_obj)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data_obj, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    int32_t h = murmur2_of((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)h);
}

/* ------------------------------------------------------------------------------------------ */
/* consumer_records                                                                             */

PyDoc_STRVAR(consumer_records_doc,
"consumer_records(cls, records, topic, partition, leader_epoch, /)\n"
"--\n"
"\n"
"One cls tuple per Record: (topic, partition, leader_epoch, offset, timestamp,\n"
"int(timestamp_type), key, value, headers, None, key size, value size, header size), the\n"
"fields of kafkastate.structs.ConsumerRecord, sizes -1 for None (header size: the sum of\n"
"len(key) + len(value) over the headers, -1 without headers). Records without headers\n"
"hold only atomic objects and are untracked by the cyclic GC, as CPython does for such\n"
"tuples. Returns the list.");

static PyObject *
consumer_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "consumer_records() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *cls = args[0];
    PyObject *records = args[1];
    PyObject *topic = args[2];
    PyObject *partition = args[3];
    PyObject *epoch = args[4];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "consumer_records() needs a tuple subclass");
        return NULL;
    }
    if (!PyList_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "consumer_records() needs a list of records");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    PyObject *last_ts_type = NULL; /* borrowed: the Record's timestamp_type last converted */
    PyObject *last_ts_int = NULL;  /* owned: its int */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 6) {
            PyErr_SetString(PyExc_TypeError, "consumer_records() needs Record tuples");
            goto error;
        }
        PyObject *ts_type = PyTuple_GET_ITEM(r, 2);
        if (ts_type != last_ts_type) {
            PyObject *as_int = PyNumber_Long(ts_type); /* IntEnum -> int */
            if (as_int == NULL) {
                goto error;
            }
            Py_XSETREF(last_ts_int, as_int);
            last_ts_type = ts_type;
        }
        PyObject *fields[6];
        for (int f = 0; f < 6; f++) {
            fields[f] = Py_NewRef(PyTuple_GET_ITEM(r, f));
        }
        PyObject *rec = new_consumer_record(type, fields, topic, partition, epoch, last_ts_int);
        if (rec == NULL) {
            goto error;
        }
        PyList_SET_ITEM(out, i, rec);
    }
    Py_XDECREF(last_ts_int);
    return out;
error:
    Py_XDECREF(last_ts_int);
    Py_DECREF(out); /* unset items are NULL, which list deallocation skips */
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* the producer's per-record appends: accumulator.Accumulator.append_sticky / append_keyed     */

/* lane_sticky() and lane_keyed() are the bodies of Accumulator.append_sticky and
 * append_keyed (with RecordBatchBuilder.append_value inlined): the same guards, the same
 * record bytes, the same state changes, in one call instead of three Python frames;
 * lane_hashed() is Partitioner.key_partition followed by lane_keyed(). The state lives in the
 * __slots__ of five classes (the accumulator, its batches, their builders, the partitioner
 * and its sticky state); setup_lanes() finds each slot's offset from the class's
 * member descriptor, and an object is only touched when its type is exactly the class that
 * was registered, so the offsets hold. Whatever is unusual (a slot holding something other
 * than an int, a subclass, a value beyond int64) returns None before anything changed: the
 * Python general path then decides, as it does for the Python hot paths' None. */

enum {
    A_LANES, A_QUEUES, A_WAITING, A_HELD, A_CLOSED, A_NEXT_RECORD, A_USED, A_OUTSTANDING,
    A_BUFFER_MEMORY, A_BATCH_LIMIT,
    B_ACCEPTING, B_SIZE, B_IDS, B_RECORDS, B_BUILDER,
    R_PARTS, R_NEXT_DELTA, R_BASE_TS, R_MAX_TS, R_SIZE,
    S_PRODUCED, S_CHECKED_IN,
    P_CUSTOM, P_COUNTS,
    N_SLOTS
};

static const char *const slot_names[N_SLOTS] = {
    "_lanes", "_queues", "_waiting", "_held", "_closed", "_next_record", "_used",
    "_outstanding", "_buffer_memory", "_batch_limit",
    "_accepting", "_size", "_ids", "_records", "_builder",
    "_parts", "_next_delta", "_base_ts", "_max_ts", "_size",
    "produced", "checked_in",
    "_custom", "_counts",
};

/* which of the four registered classes owns each slot */
static const int slot_class[N_SLOTS] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 4, 4,
};

#define N_CLASSES 5
static PyTypeObject *lane_classes[N_CLASSES] = {NULL, NULL, NULL, NULL, NULL};
static Py_ssize_t slot_offset[N_SLOTS];
static PyObject *empty_tuple = NULL;

#define SLOT(obj, i) (*(PyObject **)((char *)(obj) + slot_offset[i]))
#define MAX_SMALL_VALUE 8000 /* accumulator._SMALL_VALUE */
#define BATCH_OVERHEAD 61    /* records.RECORD_BATCH_OVERHEAD */

/* Replace a slot's value with `value` (a new reference, stolen). */
static inline void
set_slot(PyObject *obj, int i, PyObject *value)
{
    PyObject **p = (PyObject **)((char *)obj + slot_offset[i]);
    PyObject *old = *p;
    *p = value;
    Py_XDECREF(old);
}

/* A slot holding an exact int within int64 into *out: 1, or 0 (no exception) otherwise. */
static inline int
slot_int(PyObject *obj, int i, long long *out)
{
    PyObject *v = SLOT(obj, i);
    if (v == NULL || !PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    return !overflow; /* an exact int raises nothing */
}

/* `type(ts) is int and 0 <= ts <= 2**63 - 1` (accumulator._MAX_TIMESTAMP) into *out. */
static inline int
timestamp_of(PyObject *ts, long long *out)
{
    if (!PyLong_CheckExact(ts)) {
        return 0;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(ts, &overflow);
    return !overflow && *out >= 0;
}

/* The last item of a deque (or any sequence), borrowed through a new reference the caller
 * drops, or NULL (no exception) when it is empty. */
static PyObject *
last_of(PyObject *dq)
{
    Py_ssize_t n = PySequence_Size(dq);
    if (n <= 0) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *last = PySequence_GetItem(dq, n - 1);
    if (last == NULL) {
        PyErr_Clear();
    }
    return last;
}

/* One record without headers onto a builder's parts, the four items append_record() writes
 * for it: returns its size, or -1 with an exception and `parts` unchanged. */
static Py_ssize_t
append_plain(PyObject *parts, long long od, long long tsd, PyObject *key, PyObject *value)
{
    Py_ssize_t klen = key == NULL ? 0 : PyBytes_GET_SIZE(key);
    Py_ssize_t vlen = PyBytes_GET_SIZE(value);
    uint64_t ztsd = zigzag(tsd);
    uint64_t zod = zigzag(od);
    Py_ssize_t head_len = 1 + uvarint_size(ztsd) + uvarint_size(zod) + uvarint_size(zigzag(vlen));
    head_len += key == NULL ? 1 : uvarint_size(zigzag(klen)) + klen;
    PyObject *head = PyBytes_FromStringAndSize(NULL, head_len);
    if (head == NULL) {
        return -1;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(head);
    *p++ = 0;
    p = put_uvarint(p, ztsd);
    p = put_uvarint(p, zod);
    if (key == NULL) {
        *p++ = 1;
    }
    else {
        p = put_uvarint(p, zigzag(klen));
        memcpy(p, PyBytes_AS_STRING(key), (size_t)klen);
        p += klen;
    }
    put_uvarint(p, zigzag(vlen));
    Py_ssize_t body = head_len + vlen + 1; /* + the header count, 0 */
    unsigned char pbuf[10];
    Py_ssize_t plen = put_uvarint(pbuf, zigzag(body)) - pbuf;
    PyObject *prefix = PyBytes_FromStringAndSize((const char *)pbuf, plen);
    if (prefix == NULL) {
        Py_DECREF(head);
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(parts);
    int failed = PyList_Append(parts, prefix) < 0 || PyList_Append(parts, head) < 0 ||
                 PyList_Append(parts, value) < 0 || PyList_Append(parts, no_headers_tail) < 0;
    Py_DECREF(prefix);
    Py_DECREF(head);
    if (failed) {
        PyList_SetSlice(parts, n, PyList_GET_SIZE(parts), NULL);
        return -1;
    }
    return plen + body;
}

/* The common tail of both hot paths: append (ts, key, value) to `batch`, whose size is
 * `bsize`, when the record's upper bound `upper` keeps it below the batch limit and within
 * buffer memory. Returns a new reference to the record id, Py_None (a new reference: nothing
 * changed, take the general path), or NULL with an exception. *grown gets the bytes added. */
static PyObject *
append_to_batch(PyObject *acc, PyObject *batch, PyObject *ts, long long ts_v, PyObject *key,
                PyObject *value, long long upper, long long *grown)
{
    long long bsize, limit, used, memory, od, base_ts, max_ts, rsize, next_id, outstanding;
    if (!slot_int(batch, B_SIZE, &bsize) || !slot_int(acc, A_BATCH_LIMIT, &limit) ||
        !slot_int(acc, A_USED, &used) || !slot_int(acc, A_BUFFER_MEMORY, &memory) ||
        !slot_int(acc, A_NEXT_RECORD, &next_id) || !slot_int(acc, A_OUTSTANDING, &outstanding)) {
        Py_RETURN_NONE;
    }
    if (bsize + upper >= limit || used + upper > memory) {
        Py_RETURN_NONE; /* it might fill the batch, or not fit: the general path decides */
    }
    PyObject *builder = SLOT(batch, B_BUILDER);
    PyObject *ids = SLOT(batch, B_IDS);
    PyObject *records = SLOT(batch, B_RECORDS);
    if (builder == NULL || !Py_IS_TYPE(builder, lane_classes[2]) || ids == NULL ||
        !PyList_CheckExact(ids) || records == NULL || !PyList_CheckExact(records)) {
        Py_RETURN_NONE;
    }
    PyObject *parts = SLOT(builder, R_PARTS);
    if (parts == NULL || !PyList_CheckExact(parts) || !slot_int(builder, R_BASE_TS, &base_ts) ||
        !slot_int(builder, R_NEXT_DELTA, &od) || !slot_int(builder, R_MAX_TS, &max_ts) ||
        !slot_int(builder, R_SIZE, &rsize)) {
        Py_RETURN_NONE; /* an empty builder (no base timestamp): the general path */
    }
    /* Everything that can fail first; then the state changes, which cannot. */
    PyObject *rec = PyTuple_Pack(4, ts, key == NULL ? Py_None : key, value, empty_tuple);
    PyObject *rid = SLOT(acc, A_NEXT_RECORD);
    Py_INCREF(rid);
    PyObject *next_delta = PyLong_FromLongLong(od + 1);
    PyObject *next_rid = PyLong_FromLongLong(next_id + 1);
    PyObject *more = PyLong_FromLongLong(outstanding + 1);
    Py_ssize_t size = -1;
    if (rec != NULL && next_delta != NULL && next_rid != NULL && more != NULL) {
        size = append_plain(parts, od, ts_v - base_ts, key, value);
    }
    if (size < 0) {
        goto fail;
    }
    Py_ssize_t n = PyList_GET_SIZE(parts) - 4;
    if (PyList_Append(ids, rid) < 0) {
        PyList_SetSlice(parts, n, PyList_GET_SIZE(parts), NULL);
        goto fail;
    }
    if (PyList_Append(records, rec) < 0) {
        PyList_SetSlice(ids, PyList_GET_SIZE(ids) - 1, PyList_GET_SIZE(ids), NULL);
        PyList_SetSlice(parts, n, PyList_GET_SIZE(parts), NULL);
        goto fail;
    }
    Py_DECREF(rec);
    rsize += size;
    long long batch_size = BATCH_OVERHEAD + rsize;
    *grown = batch_size - bsize;
    PyObject *values[4] = {
        PyLong_FromLongLong(rsize), PyLong_FromLongLong(batch_size),
        PyLong_FromLongLong(used + *grown), NULL};
    if (values[0] == NULL || values[1] == NULL || values[2] == NULL) {
        /* out of memory after the record went in: undo it */
        PyList_SetSlice(records, PyList_GET_SIZE(records) - 1, PyList_GET_SIZE(records), NULL);
        PyList_SetSlice(ids, PyList_GET_SIZE(ids) - 1, PyList_GET_SIZE(ids), NULL);
        PyList_SetSlice(parts, n, PyList_GET_SIZE(parts), NULL);
        Py_XDECREF(values[0]);
        Py_XDECREF(values[1]);
        Py_XDECREF(values[2]);
        rec = NULL;
        goto fail;
    }
    if (ts_v > max_ts) {
        Py_INCREF(ts);
        set_slot(builder, R_MAX_TS, ts);
    }
    set_slot(builder, R_NEXT_DELTA, next_delta);
    set_slot(builder, R_SIZE, values[0]);
    set_slot(batch, B_SIZE, values[1]);
    set_slot(acc, A_USED, values[2]);
    set_slot(acc, A_NEXT_RECORD, next_rid);
    set_slot(acc, A_OUTSTANDING, more);
    return rid;
fail:
    Py_XDECREF(rec);
    Py_DECREF(rid);
    Py_XDECREF(next_delta);
    Py_XDECREF(next_rid);
    Py_XDECREF(more);
    return NULL;
}

static int
lanes_ready(PyObject *acc)
{
    return lane_classes[0] != NULL && Py_IS_TYPE(acc, lane_classes[0]);
}

PyDoc_STRVAR(lane_sticky_doc,
"lane_sticky(accumulator, topic, timestamp_ms, value, cluster, /)\n"
"--\n"
"\n"
"Accumulator.append_sticky compiled: the record's id, or None (nothing changed: take the\n"
"general path).");

static PyObject *
lane_sticky(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "lane_sticky() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *acc = args[0];
    PyObject *ts = args[2];
    PyObject *value = args[3];
    long long ts_v, produced, threshold;
    if (!lanes_ready(acc) || !PyBytes_CheckExact(value) ||
        PyBytes_GET_SIZE(value) >= MAX_SMALL_VALUE || !timestamp_of(ts, &ts_v)) {
        Py_RETURN_NONE;
    }
    PyObject *lanes = SLOT(acc, A_LANES);
    if (lanes == NULL || !PyDict_CheckExact(lanes)) {
        Py_RETURN_NONE;
    }
    PyObject *lane = PyDict_GetItemWithError(lanes, args[1]); /* borrowed */
    if (lane == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (!PyTuple_CheckExact(lane) || PyTuple_GET_SIZE(lane) != 4) {
        Py_RETURN_NONE;
    }
    Py_INCREF(lane); /* the dict could lose it while the deque is read */
    PyObject *batch = PyTuple_GET_ITEM(lane, 0);
    PyObject *s = PyTuple_GET_ITEM(lane, 2);
    PyObject *result = Py_None;
    Py_INCREF(result);
    if (!Py_IS_TYPE(batch, lane_classes[1]) || !Py_IS_TYPE(s, lane_classes[3]) ||
        SLOT(batch, B_ACCEPTING) != Py_True || SLOT(s, S_CHECKED_IN) != args[4] ||
        !slot_int(s, S_PRODUCED, &produced) || !PyLong_CheckExact(PyTuple_GET_ITEM(lane, 3))) {
        goto done;
    }
    threshold = PyLong_AsLongLong(PyTuple_GET_ITEM(lane, 3));
    if (threshold == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto done;
    }
    PyObject *last = last_of(PyTuple_GET_ITEM(lane, 1));
    Py_XDECREF(last);
    if (last != batch) {
        goto done; /* drained, expired or closed behind the lane's back */
    }
    Py_ssize_t n = PyBytes_GET_SIZE(value);
    long long body = n < 64 ? 19 + n : 20 + n; /* accumulator._small_value_upper_bound */
    long long upper = body + (body < 64 ? 1 : 2);
    if (produced + upper >= 2 * threshold) {
        goto done; /* it might switch partitions */
    }
    long long grown = 0;
    Py_DECREF(result);
    result = append_to_batch(acc, batch, ts, ts_v, NULL, value, upper, &grown);
    if (result != NULL && result != Py_None) {
        PyObject *now_produced = PyLong_FromLongLong(produced + grown);
        if (now_produced == NULL) {
            /* the record is in: only the partitioner's count could not be kept; a
             * MemoryError here leaves the producer unusable anyway */
            Py_DECREF(result);
            result = NULL;
        }
        else {
            set_slot(s, S_PRODUCED, now_produced);
        }
    }
done:
    Py_DECREF(lane);
    return result;
}

PyDoc_STRVAR(lane_keyed_doc,
"lane_keyed(accumulator, topic, partition, timestamp_ms, key, value, /)\n"
"--\n"
"\n"
"Accumulator.append_keyed compiled: the record's id, or None (nothing changed: take the\n"
"general path).");

static PyObject *keyed_append(PyObject *acc, PyObject *topic, PyObject *partition,
                              PyObject *ts, PyObject *key, PyObject *value);

static PyObject *
lane_keyed(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "lane_keyed() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    return keyed_append(args[0], args[1], args[2], args[3], args[4], args[5]);
}

/* lane_keyed's body: `partition` is the partition's int. */
static PyObject *
keyed_append(PyObject *acc, PyObject *topic, PyObject *partition, PyObject *ts, PyObject *key,
             PyObject *value)
{
    long long ts_v;
    if (!lanes_ready(acc) || !PyBytes_CheckExact(key) || !PyBytes_CheckExact(value) ||
        PyBytes_GET_SIZE(key) >= 64 || PyBytes_GET_SIZE(value) >= MAX_SMALL_VALUE ||
        !timestamp_of(ts, &ts_v)) {
        Py_RETURN_NONE;
    }
    PyObject *queues = SLOT(acc, A_QUEUES);
    PyObject *waiting = SLOT(acc, A_WAITING);
    PyObject *held = SLOT(acc, A_HELD);
    if (queues == NULL || !PyDict_CheckExact(queues) || waiting == NULL ||
        !PyDict_CheckExact(waiting) || PyDict_GET_SIZE(waiting) || held == NULL ||
        !PyDict_CheckExact(held) || PyDict_GET_SIZE(held) || SLOT(acc, A_CLOSED) != Py_False) {
        Py_RETURN_NONE;
    }
    PyObject *tp = PyTuple_Pack(2, topic, partition);
    if (tp == NULL) {
        return NULL;
    }
    PyObject *dq = PyDict_GetItemWithError(queues, tp); /* borrowed */
    Py_DECREF(tp);
    if (dq == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *batch = last_of(dq);
    if (batch == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *result;
    if (!Py_IS_TYPE(batch, lane_classes[1]) || SLOT(batch, B_ACCEPTING) != Py_True) {
        result = Py_None;
        Py_INCREF(result);
    }
    else {
        Py_ssize_t nk = PyBytes_GET_SIZE(key);
        Py_ssize_t n = PyBytes_GET_SIZE(value);
        long long body = n < 64 ? 19 + nk + n : 20 + nk + n;
        long long upper = body + (body < 64 ? 1 : 2);
        long long grown = 0;
        result = append_to_batch(acc, batch, ts, ts_v, key, value, upper, &grown);
    }
    Py_DECREF(batch);
    return result;
}

PyDoc_STRVAR(lane_hashed_doc,
"lane_hashed(accumulator, partitioner, topic, timestamp_ms, key, value, cluster, /)\n"
"--\n"
"\n"
"Partitioner.key_partition then Accumulator.append_keyed, compiled: the partition from the\n"
"partitioner's count cached for `cluster` and murmur2 of the key, then the keyed append.\n"
"The record's id, or None (nothing changed: no cached count, a custom partitioner, or\n"
"append_keyed's None).");

static PyObject *
lane_hashed(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "lane_hashed() takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *partitioner = args[1];
    PyObject *key = args[4];
    if (!lanes_ready(args[0]) || !Py_IS_TYPE(partitioner, lane_classes[4]) ||
        SLOT(partitioner, P_CUSTOM) != Py_None || !PyBytes_CheckExact(key)) {
        Py_RETURN_NONE;
    }
    PyObject *counts = SLOT(partitioner, P_COUNTS);
    if (counts == NULL || !PyDict_CheckExact(counts)) {
        Py_RETURN_NONE;
    }
    PyObject *counted = PyDict_GetItemWithError(counts, args[2]); /* borrowed */
    if (counted == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NONE; /* key_partition fills the cache */
    }
    if (!PyTuple_CheckExact(counted) || PyTuple_GET_SIZE(counted) != 2 ||
        PyTuple_GET_ITEM(counted, 0) != args[6] || !PyLong_CheckExact(PyTuple_GET_ITEM(counted, 1))) {
        Py_RETURN_NONE;
    }
    long n = PyLong_AsLong(PyTuple_GET_ITEM(counted, 1));
    if (n <= 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int32_t h = murmur2_of((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
    PyObject *partition = PyLong_FromLong((long)(((uint32_t)h & 0x7FFFFFFFu) % (unsigned long)n));
    if (partition == NULL) {
        return NULL;
    }
    PyObject *result = keyed_append(args[0], args[2], partition, args[3], key, args[5]);
    Py_DECREF(partition);
    return result;
}

PyDoc_STRVAR(setup_lanes_doc,
"setup_lanes(accumulator, batch, builder, sticky, partitioner, /)\n"
"--\n"
"\n"
"Register the classes whose __slots__ the lane functions read and write: Accumulator,\n"
"ProducerBatch, RecordBatchBuilder, the partitioner's _Sticky and Partitioner.");

static PyObject *
setup_lanes(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != N_CLASSES) {
        PyErr_Format(PyExc_TypeError, "setup_lanes() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    for (int c = 0; c < N_CLASSES; c++) {
        if (!PyType_Check(args[c])) {
            PyErr_SetString(PyExc_TypeError, "setup_lanes() needs five classes");
            return NULL;
        }
    }
    Py_ssize_t offsets[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++) {
        PyObject *descr = PyObject_GetAttrString(args[slot_class[i]], slot_names[i]);
        if (descr == NULL) {
            return NULL;
        }
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type);
        if (ok) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            ok = member->type == T_OBJECT_EX && !(member->flags & READONLY) &&
                 ((PyMemberDescrObject *)descr)->d_common.d_type ==
                     (PyTypeObject *)args[slot_class[i]];
            offsets[i] = member->offset;
        }
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "setup_lanes(): %R.%s is not a slot of its own",
                         args[slot_class[i]], slot_names[i]);
            return NULL;
        }
    }
    if (empty_tuple == NULL && (empty_tuple = PyTuple_New(0)) == NULL) {
        return NULL;
    }
    memcpy(slot_offset, offsets, sizeof(offsets));
    for (int c = 0; c < N_CLASSES; c++) {
        Py_INCREF(args[c]);
        Py_XSETREF(lane_classes[c], (PyTypeObject *)args[c]);
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------ */
/* setup                                                                                        */

PyDoc_STRVAR(setup_doc,
"setup(record_type, malformed, /)\n"
"--\n"
"\n"
"Store the Record class (a tuple subclass) that parse_records builds and the exception\n"
"class it raises for malformed input.");

static PyObject *
setup(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "setup() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *rtype = args[0];
    PyObject *exc = args[1];
    if (!PyType_Check(rtype) || !PyType_IsSubtype((PyTypeObject *)rtype, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "setup() needs a tuple subclass as the record type");
        return NULL;
    }
    if (!PyExceptionClass_Check(exc)) {
        PyErr_SetString(PyExc_TypeError, "setup() needs an exception class");
        return NULL;
    }
    Py_INCREF(rtype);
    Py_XSETREF(record_type, (PyTypeObject *)rtype);
    Py_INCREF(exc);
    Py_XSETREF(malformed, exc);
    Py_RETURN_NONE;
}

static PyMethodDef speedups_methods[] = {
    {"parse_records", (PyCFunction)(void (*)(void))parse_records, METH_FASTCALL,
     parse_records_doc},
    {"append_record", (PyCFunction)(void (*)(void))append_record, METH_FASTCALL,
     append_record_doc},
    {"append_records", (PyCFunction)(void (*)(void))append_records, METH_FASTCALL,
     append_records_doc},
    {"consumer_records", (PyCFunction)(void (*)(void))consumer_records, METH_FASTCALL,
     consumer_records_doc},
    {"murmur2", murmur2, METH_O, murmur2_doc},
    {"lane_sticky", (PyCFunction)(void (*)(void))lane_sticky, METH_FASTCALL, lane_sticky_doc},
    {"lane_keyed", (PyCFunction)(void (*)(void))lane_keyed, METH_FASTCALL, lane_keyed_doc},
    {"lane_hashed", (PyCFunction)(void (*)(void))lane_hashed, METH_FASTCALL, lane_hashed_doc},
    {"setup_lanes", (PyCFunction)(void (*)(void))setup_lanes, METH_FASTCALL, setup_lanes_doc},
    {"setup", (PyCFunction)(void (*)(void))setup, METH_FASTCALL, setup_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "kafkastate.core.protocol._speedups",
    "Optional C accelerator for kafkastate.core.protocol.records (see records.py).",
    -1,
    speedups_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (no_headers_tail == NULL) {
        no_headers_tail = PyBytes_FromStringAndSize("", 1); /* b"\x00" */
        if (no_headers_tail == NULL) {
            return NULL;
        }
    }
    return PyModule_Create(&speedups_module);
}
