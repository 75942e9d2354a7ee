/* Fuzz target: the IDX reader, plain and gzip.  The first input byte picks
 * which file is fuzzed (images or labels); the other one is a small valid
 * file.  Every input is loaded or refused with a message naming the file;
 * what loads is consistent (counts, classes). */
#include "fuzz_util.h"

static const uint8_t k_labels[] = {0, 0, 8, 1, 0, 0, 0, 2, 1, 0}; /* classes from 0, no gap */
static const uint8_t k_images[16 + 2 * 4] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2,
                                             1,  2, 3, 4, 5, 6, 7, 8};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    if (n < 1) return 0;
    const int fuzz_labels = data[0] & 1;
    char img[512], lab[512];
    snprintf(img, sizeof img, "%s", fuzz_path(".img"));
    snprintf(lab, sizeof lab, "%s", fuzz_path(".lab"));
    fuzz_write(img, fuzz_labels ? k_images : data + 1, fuzz_labels ? sizeof k_images : n - 1);
    fuzz_write(lab, fuzz_labels ? data + 1 : k_labels, fuzz_labels ? n - 1 : sizeof k_labels);
    actc_image_dataset d;
    if (actc_idx_load(img, lab, &d) == ACTC_OK) {
        if (d.n <= 0 || d.h <= 0 || d.w <= 0 || d.c != 1 || d.num_classes < 1 || d.num_classes > 256) abort();
        for (int i = 0; i < d.n; i++)
            if (d.labels[i] < 0 || d.labels[i] >= d.num_classes) abort();
        actc_image_dataset_free(&d);
    } else if (!strstr(actc_last_error(), fuzz_labels ? lab : img) && !strstr(actc_last_error(), "count")) {
        fprintf(stderr, "refused without naming the file: %s\n", actc_last_error());
        abort();
    }
    unlink(img);
    unlink(lab);
    return 0;
}
