/*
 * binlog_rows: the ids of the rows a write rows event inserted.  The
 * layout is binlog version 4's, shared by MySQL and MariaDB: a table map
 * gives each column's type and metadata, a rows event a bitmap of the
 * columns it carries and, per row, a bitmap of its NULLs and the values
 * of the others, each as long as its type says.  Any type it does not
 * know makes the ids unknown rather than guessed: the claim then reads
 * the range, as it would without them.
 */
#include "binlog_rows.h"

#include <string.h>

/* enum_field_types, include/mysql_com.h (MariaDB: include/mysql.h). */
enum {
    TY_TINY = 1,
    TY_SHORT = 2,
    TY_LONG = 3,
    TY_FLOAT = 4,
    TY_DOUBLE = 5,
    TY_NULL = 6,
    TY_TIMESTAMP = 7,
    TY_LONGLONG = 8,
    TY_INT24 = 9,
    TY_DATE = 10,
    TY_TIME = 11,
    TY_DATETIME = 12,
    TY_YEAR = 13,
    TY_NEWDATE = 14,
    TY_VARCHAR = 15,
    TY_BIT = 16,
    TY_TIMESTAMP2 = 17,
    TY_DATETIME2 = 18,
    TY_TIME2 = 19,
    TY_JSON = 245,
    TY_NEWDECIMAL = 246,
    TY_ENUM = 247,
    TY_SET = 248,
    TY_TINY_BLOB = 249,
    TY_MEDIUM_BLOB = 250,
    TY_LONG_BLOB = 251,
    TY_BLOB = 252,
    TY_VAR_STRING = 253,
    TY_STRING = 254,
    TY_GEOMETRY = 255,
};

#define NO_SIZE ((size_t)-1)

static uint64_t
le_n(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i > 0; i--)
        v = v << 8 | p[i - 1];
    return v;
}

/* A length-encoded integer at *i; false past n or for the NULL mark. */
static bool
packed_int(const unsigned char *b, size_t n, size_t *i, uint64_t *v)
{
    if (*i >= n)
        return false;
    unsigned first = b[*i];
    size_t len = first < 251 ? 0 : first == 252 ? 2 : first == 253 ? 3 : 8;
    if (first == 251 || (first == 255) || n - *i - 1 < len)
        return false;
    *v = len == 0 ? first : le_n(b + *i + 1, len);
    *i += 1 + len;
    return true;
}

/* How many metadata bytes a table map gives a column of type t. */
/* The types whose value follows a length of as many bytes as their
 * metadata says (1 to 4). */
static bool
is_blob(uint8_t t)
{
    return t == TY_BLOB || t == TY_TINY_BLOB || t == TY_MEDIUM_BLOB ||
           t == TY_LONG_BLOB || t == TY_GEOMETRY || t == TY_JSON;
}

static size_t
meta_len(uint8_t t)
{
    if (is_blob(t))
        return 1;
    switch (t) {
    case TY_FLOAT:
    case TY_DOUBLE:
    case TY_TIMESTAMP2:
    case TY_DATETIME2:
    case TY_TIME2:
        return 1;
    case TY_VARCHAR:
    case TY_VAR_STRING:
    case TY_BIT:
    case TY_NEWDECIMAL:
    case TY_STRING:
        return 2;
    default:
        return 0;
    }
}

/* Two-byte metadata: little-endian, but for the types whose first byte
 * is the high one (a CHAR's real type, a DECIMAL's precision). */
static uint16_t
meta_value(uint8_t t, const unsigned char *p, size_t len)
{
    if (len == 1)
        return p[0];
    if (len == 0)
        return 0;
    if (t == TY_NEWDECIMAL || t == TY_STRING)
        return (uint16_t)(p[0] << 8 | p[1]);
    return (uint16_t)(p[0] | p[1] << 8);
}

int
binlog_columns_read(struct binlog_columns *c, const unsigned char *b, size_t n,
                    size_t at)
{
    c->n = 0;
    uint64_t count, mlen;
    size_t i = at;
    if (!packed_int(b, n, &i, &count) || count == 0 ||
        count > BINLOG_COLUMNS_MAX || n - i < count)
        return -1;
    const unsigned char *types = b + i;
    i += count;
    if (!packed_int(b, n, &i, &mlen) || n - i < mlen)
        return -1;
    size_t m = i, mend = i + mlen;
    for (size_t j = 0; j < count; j++) {
        size_t len = meta_len(types[j]);
        if (mend - m < len)
            return -1;
        c->type[j] = types[j];
        c->meta[j] = meta_value(types[j], b + m, len);
        m += len;
    }
    if (m != mend)
        return -1;
    c->n = (uint16_t)count;
    return 0;
}

/* Bytes of a packed DECIMAL: 4 per 9 digits, the rest as few as fit. */
static size_t
decimal_size(unsigned precision, unsigned scale)
{
    static const unsigned char dig2bytes[9] = {0, 1, 1, 2, 2, 3, 3, 4, 4};
    if (scale > precision || precision > 65)
        return NO_SIZE;
    unsigned intg = precision - scale;
    return (intg / 9) * 4 + dig2bytes[intg % 9] + (scale / 9) * 4 +
           dig2bytes[scale % 9];
}

/* A value behind a length of lenlen bytes. */
static size_t
prefixed_size(const unsigned char *p, size_t left, size_t lenlen)
{
    if (lenlen < 1 || lenlen > 4 || left < lenlen)
        return NO_SIZE;
    uint64_t len = le_n(p, lenlen);
    return len <= left - lenlen ? lenlen + (size_t)len : NO_SIZE;
}

/* A CHAR, ENUM or SET: its real type and length packed in the metadata
 * (Field_string::save_field_metadata; lengths past 255 borrow two bits
 * of the type byte). */
static size_t
string_size(uint16_t meta, const unsigned char *p, size_t left)
{
    unsigned b0 = meta >> 8, b1 = meta & 0xff;
    unsigned real = b0, max_len = b1;
    if ((b0 & 0x30) != 0x30) {
        max_len = b1 | (((b0 & 0x30) ^ 0x30) << 4);
        real = b0 | 0x30;
    }
    if (real == TY_ENUM || real == TY_SET)
        return b1 >= 1 && b1 <= 8 ? b1 : NO_SIZE;
    if (real != TY_STRING)
        return NO_SIZE;
    return prefixed_size(p, left, max_len > 255 ? 2 : 1);
}

/* Fractional seconds: (fsp + 1) / 2 bytes after the whole ones. */
static size_t
temporal_size(size_t whole, uint16_t fsp)
{
    return fsp <= 6 ? whole + (fsp + 1) / 2 : NO_SIZE;
}

static size_t
fixed_size(uint8_t t)
{
    switch (t) {
    case TY_TINY:
    case TY_YEAR:
        return 1;
    case TY_SHORT:
        return 2;
    case TY_INT24:
    case TY_DATE:
    case TY_NEWDATE:
    case TY_TIME:
        return 3;
    case TY_LONG:
    case TY_FLOAT:
    case TY_TIMESTAMP:
        return 4;
    case TY_LONGLONG:
    case TY_DOUBLE:
    case TY_DATETIME:
        return 8;
    case TY_NULL:
        return 0;
    default:
        return NO_SIZE;
    }
}

/* How many bytes the value at p takes, left of them readable. */
static size_t
value_size(uint8_t t, uint16_t meta, const unsigned char *p, size_t left)
{
    size_t size;
    switch (t) {
    case TY_TIMESTAMP2:
        size = temporal_size(4, meta);
        break;
    case TY_DATETIME2:
        size = temporal_size(5, meta);
        break;
    case TY_TIME2:
        size = temporal_size(3, meta);
        break;
    case TY_NEWDECIMAL:
        size = decimal_size(meta >> 8, meta & 0xff);
        break;
    case TY_BIT:
        size = (meta >> 8) + ((meta & 0xff) != 0);
        break;
    case TY_VARCHAR:
    case TY_VAR_STRING:
        size = prefixed_size(p, left, meta > 255 ? 2 : 1);
        break;
    case TY_STRING: /* CHAR, and ENUM and SET, by the metadata */
        size = string_size(meta, p, left);
        break;
    default:
        size = is_blob(t) ? prefixed_size(p, left, meta) : fixed_size(t);
        break;
    }
    return size != NO_SIZE && size <= left ? size : NO_SIZE;
}

static bool
bit_set(const unsigned char *bits, size_t k)
{
    return bits[k / 8] & (1u << (k % 8));
}

static bool
is_integer(uint8_t t)
{
    return t == TY_TINY || t == TY_SHORT || t == TY_INT24 || t == TY_LONG ||
           t == TY_LONGLONG;
}

/* One row at *i: its NULL bitmap, then the values it carries; the id
 * column's value into *id.  false: it does not add up, or no id. */
static bool
read_row(const struct binlog_columns *c, unsigned id_col,
         const unsigned char *present, size_t npresent, const unsigned char *b,
         size_t n, size_t *i, uint64_t *id)
{
    size_t nulls_len = (npresent + 7) / 8;
    if (n - *i < nulls_len)
        return false;
    const unsigned char *nulls = b + *i;
    size_t at = *i + nulls_len, k = 0;
    bool got = false;
    for (unsigned j = 0; j < c->n; j++) {
        if (!bit_set(present, j))
            continue;
        if (bit_set(nulls, k++))
            continue;
        size_t size = value_size(c->type[j], c->meta[j], b + at, n - at);
        if (size == NO_SIZE)
            return false;
        if (j == id_col) {
            *id = le_n(b + at, size);
            got = true;
        }
        at += size;
    }
    *i = at;
    return got;
}

/* The post-header and the column count and bitmap of a write event:
 * where the first row starts, or 0. */
static size_t
rows_start(const struct binlog_columns *c, const unsigned char *b, size_t n,
           uint8_t post_len, bool v2, const unsigned char **present)
{
    size_t i = post_len;
    if (post_len < 8 || n < i)
        return 0;
    if (v2) {
        uint64_t extra = post_len >= 10 ? le_n(b + post_len - 2, 2) : 0;
        if (extra < 2 || n - i < extra - 2)
            return 0;
        i += extra - 2;
    }
    uint64_t count;
    if (!packed_int(b, n, &i, &count) || count != c->n ||
        n - i < (count + 7) / 8)
        return 0;
    *present = b + i;
    return i + (count + 7) / 8;
}

int
binlog_rows_ids(const struct binlog_columns *c, unsigned id_col,
                const unsigned char *b, size_t n, uint8_t post_len, bool v2,
                uint64_t *ids, size_t max, size_t *nids)
{
    *nids = 0;
    if (c->n == 0 || id_col >= c->n || !is_integer(c->type[id_col]))
        return -1;
    const unsigned char *present = NULL;
    size_t i = rows_start(c, b, n, post_len, v2, &present);
    if (i == 0)
        return -1;
    size_t npresent = 0;
    for (unsigned j = 0; j < c->n; j++)
        npresent += bit_set(present, j);
    while (i < n) {
        uint64_t id = 0;
        if (*nids == max ||
            !read_row(c, id_col, present, npresent, b, n, &i, &id))
            return -1;
        ids[(*nids)++] = id;
    }
    return 0;
}
