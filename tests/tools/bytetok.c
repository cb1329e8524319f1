/* Byte-level tokens for the corpus demo (make demo-corpus) and the tests:
 *   bytetok TEXT TRAIN.bin VAL.bin
 * writes every byte of TEXT as a uint16 token id (0..255), the layout
 * nanoGPT's prepare.py writes: the first 90% to TRAIN.bin, the rest to
 * VAL.bin (the held-out part). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: bytetok TEXT TRAIN.bin VAL.bin\n");
		return 2;
	}
	FILE *in = fopen(argv[1], "rb");
	if (!in) {
		perror(argv[1]);
		return 1;
	}
	static unsigned char text[1 << 24];
	size_t n = fread(text, 1, sizeof text, in);
	fclose(in);
	size_t cut = n / 10 * 9;
	for (int f = 0; f < 2; f++) {
		FILE *out = fopen(argv[2 + f], "wb");
		if (!out) {
			perror(argv[2 + f]);
			return 1;
		}
		for (size_t k = f ? cut : 0; k < (f ? n : cut); k++) {
			uint16_t t = text[k]; /* little-endian hosts, as the runtime reads */
			fwrite(&t, 2, 1, out);
		}
		if (fclose(out) != 0) {
			perror(argv[2 + f]);
			return 1;
		}
	}
	printf("%s: %zu byte tokens: %zu to %s, %zu to %s\n", argv[1], n, cut, argv[2], n - cut, argv[3]);
	return 0;
}
