#include <stdint.h>
int64_t add6(int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, int64_t f) { return a + 2*b + 3*c + 4*d + 5*e + 6*f; }
void store(int64_t *p, int64_t v) { *p = v; }
int64_t nop(void) { return 7; }
