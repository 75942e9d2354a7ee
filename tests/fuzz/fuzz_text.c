/* Fuzz target: text corpora.  Any bytes load (a corpus is bytes) or are
 * refused (empty); a loaded corpus splits at a line start and hands out
 * windows inside it, or refuses windows longer than a part. */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    const char *path = fuzz_path(".txt");
    fuzz_write(path, data, n);
    actc_text_corpus c;
    if (actc_text_load(path, 0.1, &c) == ACTC_OK) {
        if (c.n != n || c.train_end > c.n) abort();
        int32_t ids[4 * 9];
        for (int T = 1; T <= 8; T *= 2)
            for (int split = 0; split < 2; split++)
                if (actc_text_batch(&c, split, 4, T, 1, 3, ids) == ACTC_OK) {
                    for (int i = 0; i < 4 * (T + 1); i++)
                        if (ids[i] < 0 || ids[i] > 255) abort();
                }
        actc_text_free(&c);
    } else if (!actc_last_error()[0]) {
        abort();
    }
    unlink(path);
    return 0;
}
