/* HMAC-SHA256 of every value of an Arrow string array, for column masking
 * (dblog_worker/masking.py): the dump path hashes a chunk's column without a Python
 * object per cell, with the GIL released.
 *
 * hmac_hex(key, offsets, data, start, count, quote) -> (offsets, data)
 *   key      the HMAC key (bytes)
 *   offsets  the array's int32 offsets buffer (little-endian, Arrow's layout)
 *   data     the array's value bytes
 *   start    the array's offset (its first value is offsets[start])
 *   count    the number of values
 *   quote    when true, each value is hashed as '"' + value + '"' (the JSON string the
 *            value is the inside of), without building that string
 * Returns the buffers of a new string array of `count` values, each '"' + 64 lowercase hex
 * digits + '"': the JSON string of the digest. Null slots of the input get a digest too
 * (of their bytes, usually none); the caller puts the input's nulls back.
 *
 * key_state(key) and hmac_one(state, fragment) do the same for one str (the log's path).
 *
 * SHA-256 as FIPS 180-4 specifies it, HMAC as RFC 2104: tests/unit/test_masking.py
 * compares both with Python's hmac module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint32_t h[8];
    uint64_t length; /* bytes hashed so far */
    uint8_t block[64];
    size_t used;
} sha256;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void compress(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g)) +
                      K[i] + w[i];
        uint32_t t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

static void sha_init(sha256 *s) {
    static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, initial, sizeof initial);
    s->length = 0;
    s->used = 0;
}

static void sha_update(sha256 *s, const uint8_t *data, size_t n) {
    s->length += n;
    if (s->used) {
        size_t take = 64 - s->used < n ? 64 - s->used : n;
        memcpy(s->block + s->used, data, take);
        s->used += take;
        data += take;
        n -= take;
        if (s->used < 64)
            return;
        compress(s->h, s->block);
        s->used = 0;
    }
    while (n >= 64) {
        compress(s->h, data);
        data += 64;
        n -= 64;
    }
    memcpy(s->block, data, n);
    s->used = n;
}

static void sha_final(sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->length * 8;
    s->block[s->used++] = 0x80;
    if (s->used > 56) { /* no room for the length: one more block */
        memset(s->block + s->used, 0, 64 - s->used);
        compress(s->h, s->block);
        s->used = 0;
    }
    memset(s->block + s->used, 0, 56 - s->used);
    for (int i = 0; i < 8; i++)
        s->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress(s->h, s->block);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

/* The states after the key's inner and outer pad blocks: one compression each, once. */
static void hmac_keys(const uint8_t *key, size_t n, sha256 *inner, sha256 *outer) {
    uint8_t block[64] = {0};
    if (n > 64) {
        sha256 s;
        sha_init(&s);
        sha_update(&s, key, n);
        sha_final(&s, block);
    } else {
        memcpy(block, key, n);
    }
    uint8_t pad[64];
    for (int i = 0; i < 64; i++)
        pad[i] = block[i] ^ 0x36;
    sha_init(inner);
    sha_update(inner, pad, 64);
    for (int i = 0; i < 64; i++)
        pad[i] = block[i] ^ 0x5c;
    sha_init(outer);
    sha_update(outer, pad, 64);
}

static const char HEX[] = "0123456789abcdef";

static PyObject *hmac_hex(PyObject *self, PyObject *args) {
    Py_buffer key, offsets, data;
    Py_ssize_t start, count;
    int quote;
    if (!PyArg_ParseTuple(args, "y*y*y*nnp", &key, &offsets, &data, &start, &count, &quote))
        return NULL;
    PyObject *result = NULL, *out_offsets = NULL, *out_data = NULL;
    const int32_t *off = (const int32_t *)offsets.buf;
    if (start < 0 || count < 0 ||
        (size_t)offsets.len < sizeof(int32_t) * (size_t)(start + count + 1) ||
        (count > 0 && (off[start] < 0 || off[start + count] > data.len))) {
        PyErr_SetString(PyExc_ValueError, "the offsets do not fit the data");
        goto done;
    }
    for (Py_ssize_t i = start; i < start + count; i++) {
        if (off[i + 1] < off[i]) {
            PyErr_SetString(PyExc_ValueError, "the offsets are not ascending");
            goto done;
        }
    }
    if (count > INT32_MAX / 66) {
        PyErr_SetString(PyExc_ValueError, "too many values for one array");
        goto done;
    }
    out_offsets = PyBytes_FromStringAndSize(NULL, sizeof(int32_t) * (count + 1));
    out_data = PyBytes_FromStringAndSize(NULL, 66 * count);
    if (out_offsets == NULL || out_data == NULL)
        goto done;
    int32_t *new_off = (int32_t *)PyBytes_AS_STRING(out_offsets);
    char *hex = PyBytes_AS_STRING(out_data);
    const uint8_t *bytes = (const uint8_t *)data.buf;
    Py_BEGIN_ALLOW_THREADS
    sha256 inner, outer;
    hmac_keys((const uint8_t *)key.buf, (size_t)key.len, &inner, &outer);
    const uint8_t quote_char = '"';
    for (Py_ssize_t i = 0; i < count; i++) {
        sha256 s = inner;
        if (quote)
            sha_update(&s, &quote_char, 1);
        sha_update(&s, bytes + off[start + i], (size_t)(off[start + i + 1] - off[start + i]));
        if (quote)
            sha_update(&s, &quote_char, 1);
        uint8_t digest[32];
        sha_final(&s, digest);
        s = outer;
        sha_update(&s, digest, 32);
        sha_final(&s, digest);
        char *o = hex + 66 * i;
        o[0] = '"';
        for (int j = 0; j < 32; j++) {
            o[1 + 2 * j] = HEX[digest[j] >> 4];
            o[2 + 2 * j] = HEX[digest[j] & 15];
        }
        o[65] = '"';
        new_off[i] = (int32_t)(66 * i);
    }
    new_off[count] = (int32_t)(66 * count);
    Py_END_ALLOW_THREADS
    result = PyTuple_Pack(2, out_offsets, out_data);
done:
    Py_XDECREF(out_offsets);
    Py_XDECREF(out_data);
    PyBuffer_Release(&key);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    return result;
}

/* key_state(key) -> bytes: the inner and outer states of an HMAC key, for hmac_one. */
static PyObject *key_state(PyObject *self, PyObject *args) {
    Py_buffer key;
    if (!PyArg_ParseTuple(args, "y*", &key))
        return NULL;
    sha256 states[2];
    hmac_keys((const uint8_t *)key.buf, (size_t)key.len, &states[0], &states[1]);
    PyBuffer_Release(&key);
    return PyBytes_FromStringAndSize((const char *)states, sizeof states);
}

/* hmac_one(state, fragment) -> str: '"' + the hex HMAC-SHA256 of the fragment's UTF-8
 * bytes + '"', with a key_state: the log's path, one value at a time. */
static PyObject *hmac_one(PyObject *self, PyObject *args) {
    Py_buffer state;
    PyObject *fragment;
    if (!PyArg_ParseTuple(args, "y*U", &state, &fragment))
        return NULL;
    if ((size_t)state.len != 2 * sizeof(sha256)) {
        PyBuffer_Release(&state);
        PyErr_SetString(PyExc_ValueError, "not a key_state");
        return NULL;
    }
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(fragment, &size);
    if (text == NULL) {
        PyBuffer_Release(&state);
        return NULL;
    }
    sha256 states[2];
    memcpy(states, state.buf, sizeof states);
    PyBuffer_Release(&state);
    uint8_t digest[32];
    sha_update(&states[0], (const uint8_t *)text, (size_t)size);
    sha_final(&states[0], digest);
    sha_update(&states[1], digest, 32);
    sha_final(&states[1], digest);
    char hex[66];
    hex[0] = '"';
    for (int j = 0; j < 32; j++) {
        hex[1 + 2 * j] = HEX[digest[j] >> 4];
        hex[2 + 2 * j] = HEX[digest[j] & 15];
    }
    hex[65] = '"';
    return PyUnicode_FromStringAndSize(hex, 66);
}

static PyMethodDef methods[] = {
    {"key_state", key_state, METH_VARARGS,
     "key_state(key) -> bytes: an HMAC key's inner and outer SHA-256 states"},
    {"hmac_one", hmac_one, METH_VARARGS,
     "hmac_one(state, fragment) -> str: the JSON string of the HMAC-SHA256 of one value"},
    {"hmac_hex", hmac_hex, METH_VARARGS,
     "hmac_hex(key, offsets, data, start, count, quote) -> (offsets, data): the JSON "
     "string of the HMAC-SHA256 of each value of an Arrow string array"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_masks",
                                    "HMAC-SHA256 of Arrow string arrays", -1, methods};

PyMODINIT_FUNC PyInit__masks(void) { return PyModule_Create(&module); }
