/* Ring attention for one element type (included by ring_attention.c with
 * T, S, DT defined; FN(x) appends S). */

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
		nrt_copy(cur, k, nk * (int64_t)sizeof(T));
		nrt_copy(cur + nk, v, nk * (int64_t)sizeof(T));
	}
	bool have[2] = {false, false};
	for (int s = 0; s < R.n; s++) {
		int j = (R.r - s + R.n) % R.n; /* whose block this rank holds */
		NrtXfer *x = NULL;
		if (s < R.n - 1) /* the next block travels while this one is computed */
			x = ring_shift(&R, cur, nxt, 2 * P * nk, 0);
		for (int a = 0; a < P; a++)
			for (int b = 0; b < P; b++) {
				int kind = blk_kind(causal, ring_chunk(&R, R.r, a), ring_chunk(&R, j, b));
				if (kind == BLK_NONE)
					continue;
				T *kb = cur + b * nk, *vb = cur + (P + b) * nk;
				FN(nrt_attention)(bh, group, cq, ck, d, scale, kind == BLK_DIAG, cq, 0, qp[a], kb, vb,
				                  have[a] ? ob : op[a], have[a] ? lb : lp[a]);
				if (have[a])
					FN(nrt_attention_merge)(bh * cq, d, op[a], lp[a], ob, lb);
				have[a] = true;
			}
		if (s < R.n - 1) {
			nrt_sendrecv_wait(x);
			T *t = cur;
			cur = nxt, nxt = t;
		}
	}
	if (P > 1) {
		zigzag(&R, true, bh, tq, d, o, (void **)op);
		if (lse)
			zigzag(&R, true, bh, tq, 1, lse, (void **)lp);
	}
	nrt_free(qbuf), nrt_free(obuf), nrt_free(lbuf), nrt_free(cur), nrt_free(nxt), nrt_free(ob), nrt_free(lb);
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
		nrt_copy(o, plain + s2 * group * tq * d, group * tq * d * (int64_t)sizeof(T));
		nrt_copy(o + group * tq * d, dk + s2 * tk * d, tk * d * (int64_t)sizeof(T));
		nrt_copy(o + (group * tq + tk) * d, dv + s2 * tk * d, tk * d * (int64_t)sizeof(T));
	}
	if (P > 1)
		nrt_free(plain);
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
		nrt_free(o2);
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
		nrt_copy(cur, k, nk * (int64_t)sizeof(T));
		nrt_copy(cur + nk, v, nk * (int64_t)sizeof(T));
	}
	for (int s = 0; s < R.n; s++) {
		int j = (R.r - s + R.n) % R.n;
		NrtXfer *x = NULL;
		if (s < R.n - 1)
			x = ring_shift(&R, cur, nxt, 2 * P * nk, 0);
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
					FN(nrt_axpy)(group * cq * d, 1, gs, dq + a * nq + s2 * group * cq * d);
					FN(nrt_axpy)(ck * d, 1, gs + group * cq * d, dk + s2 * ck * d);
					FN(nrt_axpy)(ck * d, 1, gs + (group * cq + ck) * d, dv + s2 * ck * d);
				}
			}
		if (s < R.n - 1)
			nrt_sendrecv_wait(x);
		if (R.n > 1) { /* dk|dv follow their block; after the last step they reach its owner */
			nrt_sendrecv_wait(ring_shift(&R, dcur, dnxt, 2 * P * nk, 1));
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
	nrt_zero(dqkv, bhk * rows * d * (int64_t)sizeof(T));
	for (int64_t s2 = 0; s2 < bhk; s2++)
		for (int p = 0; p < P; p++) {
			int64_t x = ring_chunk(&R, R.r, p);
			T *dst = dqkv + s2 * rows * d;
			for (int64_t h = 0; h < group; h++)
				nrt_copy(dst + (h * tq_all + x * cq) * d, dq + p * nq + (s2 * group + h) * cq * d, cq * d * (int64_t)sizeof(T));
			nrt_copy(dst + (group * tq_all + x * ck) * d, dcur + p * nk + s2 * ck * d, ck * d * (int64_t)sizeof(T));
			nrt_copy(dst + (group * tq_all + tk_all + x * ck) * d, dcur + (P + p) * nk + s2 * ck * d, ck * d * (int64_t)sizeof(T));
		}
done:
	nrt_free(own_lse), nrt_free(qbuf), nrt_free(obuf), nrt_free(dobuf), nrt_free(lbuf);
	nrt_free(cur), nrt_free(nxt), nrt_free(dcur), nrt_free(dnxt), nrt_free(dq), nrt_free(g);
}
