/* The cells of a libpq result (text format) as Arrow string columns' buffers.
 *
 * One call reads the chosen columns of every row of a PGresult into, per column, the
 * three buffers of an Arrow string array: validity bitmap (None when no cell is NULL),
 * int32 offsets and the concatenated UTF-8 bytes. No Python object is made per cell and
 * the GIL is released while the cells are copied.
 *
 * The libpq functions come as addresses, taken by the caller from the libpq that psycopg
 * itself uses (dblog_worker/pg/cells.py): this module links to no libpq, so the result is
 * always read by the library that made it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef char *(*getvalue_fn)(const void *, int, int);
typedef int (*getlength_fn)(const void *, int, int);
typedef int (*getisnull_fn)(const void *, int, int);

typedef struct {
    int field;
    int64_t size;   /* the column's bytes, all cells */
    int64_t nulls;
    PyObject *validity, *offsets, *data;
} column;

static void release(column *cols, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_CLEAR(cols[i].validity);
        Py_CLEAR(cols[i].offsets);
        Py_CLEAR(cols[i].data);
    }
    PyMem_Free(cols);
}

static PyObject *text_columns(PyObject *self, PyObject *args)
{
    unsigned long long result_addr, getvalue_addr, getlength_addr, getisnull_addr;
    int rows, width;
    PyObject *fields;
    if (!PyArg_ParseTuple(args, "KiiO!KKK", &result_addr, &rows, &width, &PyTuple_Type, &fields,
                          &getvalue_addr, &getlength_addr, &getisnull_addr))
        return NULL;
    if (!result_addr || !getvalue_addr || !getlength_addr || !getisnull_addr) {
        PyErr_SetString(PyExc_ValueError, "a null result or libpq function address");
        return NULL;
    }
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative number of rows");
        return NULL;
    }
    const void *result = (const void *)(uintptr_t)result_addr;
    getvalue_fn getvalue = (getvalue_fn)(uintptr_t)getvalue_addr;
    getlength_fn getlength = (getlength_fn)(uintptr_t)getlength_addr;
    getisnull_fn getisnull = (getisnull_fn)(uintptr_t)getisnull_addr;

    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    column *cols = PyMem_Calloc(n ? (size_t)n : 1, sizeof(column));
    if (!cols)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        long field = PyLong_AsLong(PyTuple_GET_ITEM(fields, i));
        if (field == -1 && PyErr_Occurred()) {
            release(cols, n);
            return NULL;
        }
        if (field < 0 || field >= width) {
            release(cols, n);
            return PyErr_Format(PyExc_IndexError, "field %ld of a result of %d", field, width);
        }
        cols[i].field = (int)field;
    }

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int f = cols[i].field;
        for (int r = 0; r < rows; r++) {
            if (getisnull(result, r, f))
                cols[i].nulls++;
            else
                cols[i].size += getlength(result, r, f);
        }
    }
    Py_END_ALLOW_THREADS

    for (Py_ssize_t i = 0; i < n; i++) {
        if (cols[i].size > INT32_MAX) {
            release(cols, n);
            return PyErr_Format(PyExc_OverflowError,
                                "a column of %lld bytes: more than a string array holds",
                                (long long)cols[i].size);
        }
        cols[i].offsets = PyBytes_FromStringAndSize(NULL, ((Py_ssize_t)rows + 1) * 4);
        cols[i].data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cols[i].size);
        if (cols[i].nulls) {
            cols[i].validity = PyBytes_FromStringAndSize(NULL, ((Py_ssize_t)rows + 7) / 8);
            if (cols[i].validity)
                memset(PyBytes_AS_STRING(cols[i].validity), 0, ((size_t)rows + 7) / 8);
        }
        if (!cols[i].offsets || !cols[i].data || (cols[i].nulls && !cols[i].validity)) {
            release(cols, n);
            return NULL;
        }
    }

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int f = cols[i].field;
        int32_t *offsets = (int32_t *)PyBytes_AS_STRING(cols[i].offsets);
        char *data = PyBytes_AS_STRING(cols[i].data);
        uint8_t *validity = cols[i].validity ? (uint8_t *)PyBytes_AS_STRING(cols[i].validity)
                                             : NULL;
        int32_t at = 0;
        offsets[0] = 0;
        for (int r = 0; r < rows; r++) {
            if (!getisnull(result, r, f)) {
                int length = getlength(result, r, f);
                memcpy(data + at, getvalue(result, r, f), (size_t)length);
                at += length;
                if (validity)
                    validity[r >> 3] |= (uint8_t)(1u << (r & 7));
            }
            offsets[r + 1] = at;
        }
    }
    Py_END_ALLOW_THREADS

    PyObject *out = PyList_New(n);
    if (!out) {
        release(cols, n);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *validity = cols[i].validity ? cols[i].validity : Py_None;
        PyObject *item = Py_BuildValue("(LOOO)", (long long)cols[i].nulls, validity,
                                       cols[i].offsets, cols[i].data);
        if (!item) {
            Py_DECREF(out);
            release(cols, n);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    release(cols, n);
    return out;
}

static PyMethodDef methods[] = {
    {"text_columns", text_columns, METH_VARARGS,
     "text_columns(result, rows, width, fields, getvalue, getlength, getisnull) -> "
     "[(nulls, validity | None, offsets, data), ...]\n\n"
     "The cells of columns ``fields`` of the libpq result at address ``result`` (``rows`` "
     "rows, ``width`` columns), read with the libpq functions at the given addresses."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_textcells",
    "The cells of a libpq text result as Arrow string buffers (see cells.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__textcells(void) { return PyModule_Create(&module); }
