/* Ring attention for one element type (included by ring_attention.c with
 * T, S, DT defined; FN(x) appends S). */

/* o, lse (rows x d, rows) absorb a second partial result ob, lb over
 * other keys: the online softmax's rescale, in double. */
static void FN(ra_merge)(int64_t rows, int64_t d, T *o, T *lse, const T *ob, const T *lb)
{
	for (int64_t i = 0; i < rows; i++) {
		double l1 = lse[i], l2 = lb[i], m = l1 > l2 ? l1 : l2;
		double w1 = exp(l1 - m), w2 = exp(l2 - m), den = w1 + w2;
		for (int64_t e = 0; e < d; e++)
			o[i * d + e] = (T)(((double)o[i * d + e] * w1 + (double)ob[i * d + e] * w2) / den);
		lse[i] = (T)(m + log(den));
	}
}

/* This rank's rows as parts: views of the plain block, or the zigzag
 * chunks in buf (parts x n elements). */
static void FN(ra_parts)(const Ring *R, int64_t bh, int64_t rows, int64_t w, const T *plain, T *buf, T *part[2])
{
	if (R->parts == 1) {
		part[0] = (T *)plain;
		return;
	}
	int64_t n = bh * rows / 2 * w;
	part[0] = buf, part[1] = buf + n;
	zigzag(R, false, bh, rows, w, (void *)plain, (void **)part);
}

void FN(nrt_ring_attention)(NrtComm *c, bool zz, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d,
                            double scale, bool causal, const T *q, const T *k, const T *v, T *o, T *lse)
{
	Ring R = ring_of(c, DT, zz, causal, tq, tk);
	int P = R.parts;
	int64_t cq = tq / P, ck = tk / P, bhk = bh / group, nq = bh * cq * d, nk = bhk * ck * d;
	/* zigzag copies of q, o and lse; the travelling k|v blocks, two of them */
	T *qbuf = ring_alloc(P > 1 ? bh * tq * d : 0, sizeof(T)), *obuf = ring_alloc(P > 1 ? bh * tq * d : 0, sizeof(T));
	T *lbuf = ring_alloc(bh * tq, sizeof(T)), *cur = ring_alloc(4 * nk, sizeof(T)), *nxt = ring_alloc(4 * nk, sizeof(T));
	T *ob = ring_alloc(nq, sizeof(T)), *lb = ring_alloc(bh * cq, sizeof(T));
	T *qp[2], *op[2], *lp[2], *kp[2], *vp[2];
	FN(ra_parts)(&R, bh, tq, d, q, qbuf, qp);
	for (int a = 0; a < P; a++) {
		op[a] = P > 1 ? obuf + a * nq : o;
		lp[a] = P > 1 || !lse ? lbuf + a * bh * cq : lse;
		kp[a] = cur + a * nk, vp[a] = cur + (P + a) * nk;
	}
	if (P > 1) {
		zigzag(&R, false, bhk, tk, d, (void *)k, (void **)kp);
		zigzag(&R, false, bhk, tk, d, (void *)v, (void **)vp);
	} else {
		memcpy(cur, k, nk * sizeof(T));
		memcpy(cur + nk, v, nk * sizeof(T));
	}
	bool have[2] = {false, false};
	for (int s = 0; s < R.n; s++) {
		int j = (R.r - s + R.n) % R.n; /* whose block this rank holds */
		MPI_Request req[2];
		if (s < R.n - 1) /* the next block travels while this one is computed */
			ring_shift_start(&R, cur, nxt, 2 * P * nk, 0, req);
		for (int a = 0; a < P; a++)
			for (int b = 0; b < P; b++) {
				int kind = blk_kind(causal, ring_chunk(&R, R.r, a), ring_chunk(&R, j, b));
				if (kind == BLK_NONE)
					continue;
				T *kb = cur + b * nk, *vb = cur + (P + b) * nk;
				FN(nrt_attention)(bh, group, cq, ck, d, scale, kind == BLK_DIAG, cq, 0, qp[a], kb, vb,
				                  have[a] ? ob : op[a], have[a] ? lb : lp[a]);
				if (have[a])
					FN(ra_merge)(bh * cq, d, op[a], lp[a], ob, lb);
				have[a] = true;
			}
		if (s < R.n - 1) {
			ring_wait(req, 2);
			T *t = cur;
			cur = nxt, nxt = t;
		}
	}
	if (P > 1) {
		zigzag(&R, true, bh, tq, d, o, (void **)op);
		if (lse)
			zigzag(&R, true, bh, tq, 1, lse, (void **)lp);
	}
	free(qbuf), free(obuf), free(lbuf), free(cur), free(nxt), free(ob), free(lb);
}

/* dst += src, n elements */
static void FN(ra_acc)(T *dst, const T *src, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] += src[i];
}

/* The stacked result: this rank's rows of dq, dk, dv per kv slice,
 * [bhk, group tq + 2 tk, d], in the plain split's order. */
static void FN(ra_grad_local)(const Ring *R, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d,
                              T *dq, T *dkv, T *out)
{
	int P = R->parts;
	int64_t bhk = bh / group, nk = bhk * tk / P * d, rows = group * tq + 2 * tk;
	T *plain = dq, *dk = dkv, *dv = dkv + P * nk;
	if (P > 1) { /* the zigzag chunks back to the plain split */
		plain = ring_alloc(bh * tq * d + 2 * bhk * tk * d, sizeof(T));
		dk = plain + bh * tq * d, dv = dk + bhk * tk * d;
		T *qp[2] = {dq, dq + bh * tq / 2 * d}, *kp[2] = {dkv, dkv + nk}, *vp[2] = {dkv + 2 * nk, dkv + 3 * nk};
		zigzag(R, true, bh, tq, d, plain, (void **)qp);
		zigzag(R, true, bhk, tk, d, dk, (void **)kp);
		zigzag(R, true, bhk, tk, d, dv, (void **)vp);
	}
	for (int64_t s2 = 0; s2 < bhk; s2++) {
		T *o = out + s2 * rows * d;
		memcpy(o, plain + s2 * group * tq * d, (size_t)(group * tq * d) * sizeof(T));
		memcpy(o + group * tq * d, dk + s2 * tk * d, (size_t)(tk * d) * sizeof(T));
		memcpy(o + (group * tq + tk) * d, dv + s2 * tk * d, (size_t)(tk * d) * sizeof(T));
	}
	if (P > 1)
		free(plain);
}

void FN(nrt_ring_attention_grad)(NrtComm *c, bool zz, bool whole, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d,
                                 double scale, bool causal, const T *q, const T *k, const T *v, const T *o,
                                 const T *lse, const T *dout, T *dqkv)
{
	Ring R = ring_of(c, DT, zz, causal, tq, tk);
	int P = R.parts;
	int64_t cq = tq / P, ck = tk / P, bhk = bh / group, nq = bh * cq * d, nk = bhk * ck * d;
	int64_t gr = group * cq + 2 * ck; /* rows of a block's packed gradient per kv slice */
	T *own_lse = NULL;
	if (!lse) { /* not saved: the forward's ring once more for it */
		T *o2 = ring_alloc(bh * tq * d, sizeof(T));
		own_lse = ring_alloc(bh * tq, sizeof(T));
		FN(nrt_ring_attention)(c, zz, bh, group, tq, tk, d, scale, causal, q, k, v, o2, own_lse);
		free(o2);
		lse = own_lse;
	}
	int64_t zq = P > 1 ? bh * tq * d : 0;
	T *qbuf = ring_alloc(zq, sizeof(T)), *obuf = ring_alloc(zq, sizeof(T)), *dobuf = ring_alloc(zq, sizeof(T));
	T *lbuf = ring_alloc(P > 1 ? bh * tq : 0, sizeof(T));
	T *qp[2], *op[2], *dop[2], *lp[2];
	FN(ra_parts)(&R, bh, tq, d, q, qbuf, qp);
	FN(ra_parts)(&R, bh, tq, d, o, obuf, op);
	FN(ra_parts)(&R, bh, tq, d, dout, dobuf, dop);
	FN(ra_parts)(&R, bh, tq, 1, lse, lbuf, lp);
	/* travelling: k|v (the block held) and dk|dv (its gradient so far) */
	T *cur = ring_alloc(2 * P * nk, sizeof(T)), *nxt = ring_alloc(2 * P * nk, sizeof(T));
	T *dcur = ring_alloc(2 * P * nk, sizeof(T)), *dnxt = ring_alloc(2 * P * nk, sizeof(T));
	T *dq = ring_alloc(P * nq, sizeof(T)), *g = ring_alloc(bhk * gr * d, sizeof(T));
	if (P > 1) {
		T *kp[2] = {cur, cur + nk}, *vp[2] = {cur + 2 * nk, cur + 3 * nk};
		zigzag(&R, false, bhk, tk, d, (void *)k, (void **)kp);
		zigzag(&R, false, bhk, tk, d, (void *)v, (void **)vp);
	} else {
		memcpy(cur, k, nk * sizeof(T));
		memcpy(cur + nk, v, nk * sizeof(T));
	}
	for (int s = 0; s < R.n; s++) {
		int j = (R.r - s + R.n) % R.n;
		MPI_Request req[2];
		if (s < R.n - 1)
			ring_shift_start(&R, cur, nxt, 2 * P * nk, 0, req);
		for (int a = 0; a < P; a++)
			for (int b = 0; b < P; b++) {
				int kind = blk_kind(causal, ring_chunk(&R, R.r, a), ring_chunk(&R, j, b));
				if (kind == BLK_NONE)
					continue;
				T *kb = cur + b * nk, *vb = cur + (P + b) * nk, *dk = dcur + b * nk, *dv = dcur + (P + b) * nk;
				FN(nrt_attention_grad)(bh, group, cq, ck, d, scale, kind == BLK_DIAG, cq, 0, qp[a], kb, vb,
				                       op[a], lp[a], dop[a], g);
				for (int64_t s2 = 0; s2 < bhk; s2++) {
					const T *gs = g + s2 * gr * d;
					FN(ra_acc)(dq + a * nq + s2 * group * cq * d, gs, group * cq * d);
					FN(ra_acc)(dk + s2 * ck * d, gs + group * cq * d, ck * d);
					FN(ra_acc)(dv + s2 * ck * d, gs + (group * cq + ck) * d, ck * d);
				}
			}
		if (s < R.n - 1)
			ring_wait(req, 2);
		if (R.n > 1) { /* dk|dv follow their block; after the last step they reach its owner */
			MPI_Request dreq[2];
			ring_shift_start(&R, dcur, dnxt, 2 * P * nk, 1, dreq);
			ring_wait(dreq, 2);
			T *t = dcur;
			dcur = dnxt, dnxt = t;
			t = cur;
			cur = nxt, nxt = t;
		}
	}
	if (!whole) {
		FN(ra_grad_local)(&R, bh, group, tq, tk, d, dq, dcur, dqkv);
		goto done;
	}
	/* the packed whole-sequence gradient: this rank's rows in place */
	int64_t tq_all = (int64_t)R.n * tq, tk_all = (int64_t)R.n * tk, rows = group * tq_all + 2 * tk_all;
	memset(dqkv, 0, (size_t)(bhk * rows * d) * sizeof(T));
	for (int64_t s2 = 0; s2 < bhk; s2++)
		for (int p = 0; p < P; p++) {
			int64_t x = ring_chunk(&R, R.r, p);
			T *dst = dqkv + s2 * rows * d;
			for (int64_t h = 0; h < group; h++)
				memcpy(dst + (h * tq_all + x * cq) * d, dq + p * nq + (s2 * group + h) * cq * d, cq * d * sizeof(T));
			memcpy(dst + (group * tq_all + x * ck) * d, dcur + p * nk + s2 * ck * d, ck * d * sizeof(T));
			memcpy(dst + (group * tq_all + tk_all + x * ck) * d, dcur + (P + p) * nk + s2 * ck * d, ck * d * sizeof(T));
		}
done:
	free(own_lse), free(qbuf), free(obuf), free(dobuf), free(lbuf);
	free(cur), free(nxt), free(dcur), free(dnxt), free(dq), free(g);
}
