/* train/tensorboard.c: CRC-32C against its check values, an Event's protobuf bytes written
 * out by hand, and a file of whole TFRecords (lengths and masked CRCs) read back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "train/report.h"

static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_crc32c(void **state)
{
    (void)state;
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof ones);
    assert_int_equal(train_crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(train_crc32c(zeros, 32), 0x8A9136AAu); /* RFC 3720, B.4 */
    assert_int_equal(train_crc32c(ones, 32), 0x62A8AB43u);
    assert_int_equal(train_crc32c("", 0), 0u);
}

static void test_event_bytes(void **state)
{
    (void)state;
    /* Event{wall_time 1.5, step 3, summary{value{tag "loss", simple_value 2.0}}} */
    const uint8_t want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, /* 1: double 1.5 */
                            0x10, 0x03,                         /* 2: varint 3 */
                            0x2a, 0x0d,                         /* 5: Summary, 13 bytes */
                            0x0a, 0x0b,                         /*   1: Value, 11 bytes */
                            0x0a, 0x04, 'l', 'o', 's', 's',     /*     1: tag */
                            0x15, 0, 0, 0, 0x40};               /*     2: float 2.0 */
    uint8_t out[64];
    size_t n = train_tb_encode_event(out, sizeof out, 1.5, 3, "loss", 2.0f);
    assert_int_equal(n, sizeof want);
    assert_memory_equal(out, want, sizeof want);
    /* a step past 127 takes two varint bytes; the file's first event names its version */
    n = train_tb_encode_event(out, sizeof out, 0.0, 300, NULL, 0.0f);
    const uint8_t head[] = {0x10, 0xac, 0x02, 0x1a, 13};
    assert_int_equal(n, 9 + sizeof head + 13);
    assert_memory_equal(out + 9, head, sizeof head);
    assert_memory_equal(out + 9 + sizeof head, "brain.Event:2", 13);
    /* too small a buffer: the size it would need */
    assert_true(train_tb_encode_event(out, 4, 1.5, 3, "loss", 2.0f) == sizeof want);
}

static void test_records_on_disk(void **state)
{
    (void)state;
    char dir[] = "/tmp/tr-tb-XXXXXX";
    assert_non_null(mkdtemp(dir));
    train_tb *w = NULL;
    assert_int_equal(train_tb_open(dir, 1000.0, &w), TR_OK);
    assert_int_equal(train_tb_scalar(w, "lm loss", 1, 1001.0, 5.5f), TR_OK);
    assert_int_equal(train_tb_scalar(w, "lm loss", 2, 1002.0, 5.25f), TR_OK);
    train_tb_close(w);
    char cmd[200], path[4200];
    snprintf(cmd, sizeof cmd, "ls %s/events.out.tfevents.1000.*", dir);
    FILE *ls = popen(cmd, "r");
    assert_non_null(ls);
    assert_non_null(fgets(path, sizeof path, ls));
    pclose(ls);
    path[strcspn(path, "\n")] = 0;
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t blob[1024];
    size_t size = fread(blob, 1, sizeof blob, f);
    fclose(f);
    size_t pos = 0;
    int records = 0;
    float values[2];
    while (pos < size) {
        assert_true(pos + 12 <= size);
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)blob[pos + i] << (8 * i);
        assert_int_equal(le32(blob + pos + 8), masked(train_crc32c(blob + pos, 8)));
        assert_true(pos + 16 + len <= size);
        const uint8_t *data = blob + pos + 12;
        assert_int_equal(le32(data + len), masked(train_crc32c(data, len)));
        if (records > 0) /* the scalar's float is the record's last 4 data bytes */
            memcpy(&values[records - 1], data + len - 4, 4);
        pos += 16 + len;
        records++;
    }
    assert_int_equal(pos, size);
    assert_int_equal(records, 3);
    assert_true(values[0] == 5.5f && values[1] == 5.25f);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_event_bytes),
        cmocka_unit_test(test_records_on_disk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
