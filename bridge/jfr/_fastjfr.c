/* bridge.jfr._fastjfr: the JFR reader's hot loop in C — a run of LEB128 varints (stack frames, the fields of simple
 * events). Optional: bridge/jfr/cursor.py has the same loop in Python and uses it when this module is not built.
 *
 * varints(buf, pos, end, count) -> (list of int, new pos)
 *   Reads `count` varints from `buf` starting at `pos`, never at or past `end`: each is 7 bits per byte, low bits
 *   first, a set high bit meaning more follow; the ninth byte of a 64-bit value keeps all 8 bits (JFR's encoding of
 *   a long). Raises ValueError("truncated") when a number runs past `end`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *varints(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t pos, end, count;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &pos, &end, &count)) {
        return NULL;
    }
    if (end > view.len) {
        end = view.len;
    }
    if (pos < 0 || count < 0 || pos > end || count > end - pos) { /* each varint takes at least one byte */
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "truncated");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    PyObject *list = PyList_New(count);
    if (list == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        unsigned long long value = 0;
        unsigned int shift = 0;
        for (;;) {
            if (pos >= end) {
                Py_DECREF(list);
                PyBuffer_Release(&view);
                PyErr_SetString(PyExc_ValueError, "truncated");
                return NULL;
            }
            unsigned char b = p[pos++];
            if (shift == 56) {
                value |= (unsigned long long)b << 56;
                break;
            }
            value |= (unsigned long long)(b & 0x7F) << shift;
            if (b < 0x80) {
                break;
            }
            shift += 7;
        }
        PyObject *number = PyLong_FromUnsignedLongLong(value);
        if (number == NULL) {
            Py_DECREF(list);
            PyBuffer_Release(&view);
            return NULL;
        }
        PyList_SET_ITEM(list, i, number);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("Nn", list, pos);
}

static PyMethodDef methods[] = {
    {"varints", varints, METH_VARARGS, "varints(buf, pos, end, count) -> (list of int, new pos)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastjfr", "The JFR reader's varint loop in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__fastjfr(void) { return PyModule_Create(&module); }
