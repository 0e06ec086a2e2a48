/* check_schema_cache: the definition key and the per-session cache. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_cache.h"

Suite *schema_cache_suite(void);

/* As MariaDB prints sql/outbox.sql's table, abridged. */
static const char table_at_101[] =
    "CREATE TABLE `outbox_event` (\n"
    "  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,\n"
    "  `status` varchar(16) NOT NULL DEFAULT 'PENDING',\n"
    "  PRIMARY KEY (`id`)\n"
    ") ENGINE=InnoDB AUTO_INCREMENT=101 DEFAULT CHARSET=utf8mb4 "
    "COLLATE=utf8mb4_bin";

static char *
key_of(const char *create)
{
    struct strbuf b = {0};
    schema_definition_key(create, &b);
    return b.p;
}

START_TEST(test_key_drops_the_counter_alone)
{
    char *key = key_of(table_at_101);
    ck_assert_ptr_null(strstr(key, "AUTO_INCREMENT=101"));
    /* The column's own attribute is part of the definition. */
    ck_assert_ptr_nonnull(strstr(key, "NOT NULL AUTO_INCREMENT,\n"));
    ck_assert_ptr_nonnull(
        strstr(key, ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 "));
    /* A fresh table prints no counter: the same key. */
    char *fresh = key_of("CREATE TABLE `outbox_event` (\n"
                         "  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,\n"
                         "  `status` varchar(16) NOT NULL DEFAULT 'PENDING',\n"
                         "  PRIMARY KEY (`id`)\n"
                         ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 "
                         "COLLATE=utf8mb4_bin");
    ck_assert_str_eq(key, fresh);
    free(key);
    free(fresh);
}
END_TEST

START_TEST(test_key_keeps_every_other_difference)
{
    char *a = key_of(table_at_101);
    char *b = key_of("CREATE TABLE `outbox_event` (\n"
                     "  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,\n"
                     "  `status` varchar(32) NOT NULL DEFAULT 'PENDING',\n"
                     "  PRIMARY KEY (`id`)\n"
                     ") ENGINE=InnoDB AUTO_INCREMENT=101 DEFAULT "
                     "CHARSET=utf8mb4 COLLATE=utf8mb4_bin");
    char *c = key_of("CREATE TABLE `outbox_event` (\n"
                     "  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,\n"
                     "  `status` varchar(16) NOT NULL DEFAULT 'PENDING',\n"
                     "  PRIMARY KEY (`id`)\n"
                     ") ENGINE=InnoDB AUTO_INCREMENT=101 DEFAULT "
                     "CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci");
    ck_assert_str_ne(a, b);
    ck_assert_str_ne(a, c);
    /* Text without the closing line is kept whole. */
    char *odd = key_of("AUTO_INCREMENT=7");
    ck_assert_str_eq(odd, "AUTO_INCREMENT=7");
    free(a);
    free(b);
    free(c);
    free(odd);
}
END_TEST

/* Rows of one column holding text, as text_rows_load would copy them. */
static struct schema_rows
rows_of(const char *text)
{
    struct schema_rows r = {0};
    r.columns.nrows = r.columns.ncols = 1;
    r.columns.cells = calloc(2, sizeof(char *));
    r.columns.cells[0] = strdup(text);
    return r;
}

START_TEST(test_cache_finds_what_it_keeps)
{
    struct schema_cache *c = schema_cache_new();
    ck_assert_ptr_null(schema_cache_find(c, "a"));
    struct schema_rows r = rows_of("cols of a");
    schema_cache_put(c, "a", &r);
    ck_assert_ptr_null(r.columns.cells); /* taken over */
    const struct schema_rows *got = schema_cache_find(c, "a");
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(text_rows_row(&got->columns, 0)[0], "cols of a");
    ck_assert_ptr_null(schema_cache_find(c, "b"));
    schema_cache_clear(c);
    ck_assert_ptr_null(schema_cache_find(c, "a"));
    schema_cache_free(c);
}
END_TEST

START_TEST(test_cache_evicts_the_oldest)
{
    struct schema_cache *c = schema_cache_new();
    char key[16];
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        struct schema_rows r = rows_of(key);
        schema_cache_put(c, key, &r);
    }
    ck_assert_ptr_null(schema_cache_find(c, "k0"));
    for (int i = 1; i < 5; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        const struct schema_rows *got = schema_cache_find(c, key);
        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(text_rows_row(&got->columns, 0)[0], key);
    }
    schema_cache_free(c);
}
END_TEST

Suite *
schema_cache_suite(void)
{
    Suite *s = suite_create("schema_cache");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_key_drops_the_counter_alone);
    tcase_add_test(tc, test_key_keeps_every_other_difference);
    tcase_add_test(tc, test_cache_finds_what_it_keeps);
    tcase_add_test(tc, test_cache_evicts_the_oldest);
    suite_add_tcase(s, tc);
    return s;
}
