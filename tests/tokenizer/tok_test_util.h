/* tests/tokenizer: what the tokenizer tests share: a scratch folder, a seeded generator, file
 * writing, encoding with asserts, refused-file checks, and the mutations of the fuzzed-file
 * tests (with exercise(): whatever opens encodes anything and decodes it back). */
#ifndef TOK_TEST_UTIL_H
#define TOK_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

extern char dir[256]; /* the test's scratch folder */
uint32_t rnd(void);
/* dir/name (four at a time stay valid). */
const char *scratch(const char *name);
void write_file(const char *path, const void *data, size_t n);
/* The ids of text (malloc'ed, *n of them); asserts success. */
int32_t *encode(tr_tokenizer *t, const char *text, size_t len, int special, size_t *n);
/* text (strlen) encodes to exactly want[0 .. n_want) (what it gave printed if not). */
void expect_encoded(tr_tokenizer *t, const char *text, int special, const int32_t *want,
                    size_t n_want);
/* Opening these files works (the message printed and the test failed if not). */
tr_tokenizer *open_ok(const char *type, const char *vocab, const char *merges, const char *model);
/* Opening these files fails with a message containing needle (NULL: any), and no tokenizer. */
void expect_refused(const char *type, const char *vocab, const char *merges, const char *model,
                    const char *needle);
/* A mutated copy of data (bytes flipped, inserted, deleted, or the end cut) into out (room for
 * 12 n bytes); its length. */
size_t mutate(const char *data, size_t n, char *out);
void exercise(tr_tokenizer *t);
/* Open a mutated file: 1 when it opened (and exercise() passed), 0 when it was refused as
 * TR_ERR_INVALID (anything else fails the test). */
int open_mutated(const char *type, const char *vocab, const char *merges, const char *model);
/* A test program's main: the scratch folder /tmp/trident-NAME-PID made, the tests run, the
 * folder removed. */
/* GPT-2's byte -> character map, written out as UTF-8 into out; returns bytes written. */
size_t spell_byte(int b, char *out);
/* "{" and the 256 byte tokens of a vocabulary object ("spelled byte": id), no closing brace;
 * returns bytes written. */
size_t byte_vocab(char *v);
struct CMUnitTest;
int tok_test_main(const char *name, const struct CMUnitTest *tests, size_t n);

#endif
