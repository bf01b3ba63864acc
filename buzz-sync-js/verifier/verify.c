/*
 * What buzz-sync-js calls in WebAssembly: check a Nostr event's id and BIP-340 signature, a
 * page of them as one batch, and sign, with libsecp256k1 (bitcoin-core/secp256k1, the library
 * coincurve and so buzz-sync use), compiled in one unit with this file by build.sh. The
 * one-event check and signing are the library's own (its SHA-256 and schnorrsig module); the
 * batch check below is the one part written here, from the library's parts, because the
 * library has none (its comment says how and why).
 */
#include "secp256k1.c"

/* The library's default callbacks print and abort through libc; an illegal argument or an
 * internal error is a bug here, so trap instead (the JS caller sees a RuntimeError). */
void secp256k1_default_illegal_callback_fn(const char *message, void *data) {
  (void)message; (void)data;
  __builtin_trap();
}
void secp256k1_default_error_callback_fn(const char *message, void *data) {
  (void)message; (void)data;
  __builtin_trap();
}

/*
 * `at` holds id (32 bytes), x-only public key (32), signature (64), then the event's NIP-01
 * serialization, `[0,pubkey,created_at,kind,tags,content]` as UTF-8 (`length` bytes).
 * 1: the serialization hashes to the id and the signature is the key's over that id; 0: not.
 */
__attribute__((export_name("buzz_verify_event")))
int buzz_verify_event(const unsigned char *at, size_t length) {
  secp256k1_sha256 hash;
  unsigned char digest[32];
  secp256k1_xonly_pubkey pubkey;
  secp256k1_sha256_initialize(&hash);
  secp256k1_sha256_write(&hash, at + 128, length);
  secp256k1_sha256_finalize(&hash, digest);
  if (secp256k1_memcmp_var(digest, at, 32) != 0) return 0;
  if (!secp256k1_xonly_pubkey_parse(secp256k1_context_static, &pubkey, at + 32)) return 0;
  return secp256k1_schnorrsig_verify(secp256k1_context_static, at + 64, at, 32, &pubkey);
}

/*
 * Batch verification (BIP-340's "Batch Verification" section), written here because
 * libsecp256k1 0.7.1 has no batch API (bitcoin-core/secp256k1#1134 proposes one): built only
 * from the library's own parts (lift_x, the challenge hash, scalar arithmetic and its
 * multi-scalar multiplication, Pippenger's algorithm) and kept to the BIP's equation. For
 * events 1..u with keys P_i, signatures (r_i, s_i) and challenges e_i, and random a_i:
 *
 *     (sum a_i s_i) G - sum a_i R_i - sum a_i e_i P_i = infinity,  R_i = lift_x(r_i)
 *
 * holds when every signature is valid, and fails but with probability 2^-127 when one is not:
 * the a_i are 127-bit (unknown to whoever made the events; for one invalid term at most one
 * value of its a_i modulo the prime group order makes the sum vanish), as Ed25519 batch
 * checks use 128-bit ones. Under 2^127 the library's endomorphism split leaves a_i whole with
 * a zero second half, which its Pippenger skips: half the work for the R_i terms of full-size
 * scalars. Same-key terms are summed into one point (a collection's events come from few
 * authors). 1: every id and signature holds; 0: at least
 * one does not (or could not be checked as a batch): the caller then checks each on its own
 * with buzz_verify_event, so a failure is always attributed by the one-event check.
 *
 * `at` holds `count` records, each: length (4 bytes, little-endian), id (32), x-only key (32),
 * signature (64), the NIP-01 serialization (`length` bytes), padded to a multiple of 4.
 * `seed` is 32 bytes from the caller's CSPRNG (crypto.getRandomValues): a_i is the low 127 bits
 * of SHA-256(seed || i).
 */
typedef struct {
  secp256k1_scalar *scalars; /* a_i for -R_i (i < count), then the summed key scalars */
  secp256k1_ge *points;      /* -R_i, then the distinct keys */
} buzz_batch;

static int buzz_batch_point(secp256k1_scalar *sc, secp256k1_ge *pt, size_t idx, void *data) {
  const buzz_batch *batch = (const buzz_batch *)data;
  *sc = batch->scalars[idx];
  *pt = batch->points[idx];
  return 1;
}

static secp256k1_scratch *buzz_scratch = NULL;
static size_t buzz_scratch_points = 0;
static unsigned char *buzz_area = NULL;
static size_t buzz_area_size = 0;

/* A buffer of at least `size` bytes for the caller to lay records in (kept between calls). */
__attribute__((export_name("buzz_buffer")))
unsigned char *buzz_buffer(size_t size) {
  if (size > buzz_area_size) {
    free(buzz_area);
    buzz_area = (unsigned char *)malloc(size);
    buzz_area_size = buzz_area == NULL ? 0 : size;
  }
  return buzz_area;
}

__attribute__((export_name("buzz_verify_batch")))
int buzz_verify_batch(const unsigned char *at, size_t count, const unsigned char *seed) {
  secp256k1_scalar *scalars;
  secp256k1_ge *points;
  const unsigned char **keys; /* each distinct key's 32 bytes */
  secp256k1_scalar g_scalar, a, e, s;
  secp256k1_gej result;
  buzz_batch batch;
  size_t i, n_keys = 0, last_key = 0;
  int ok = 1;
  if (count == 0) return 1;
  scalars = (secp256k1_scalar *)malloc(2 * count * sizeof(secp256k1_scalar));
  points = (secp256k1_ge *)malloc(2 * count * sizeof(secp256k1_ge));
  keys = (const unsigned char **)malloc(count * sizeof(unsigned char *));
  if (scalars == NULL || points == NULL || keys == NULL) { ok = 0; goto done; }
  secp256k1_scalar_set_int(&g_scalar, 0);
  for (i = 0; i < count && ok; i++) {
    size_t length = (size_t)at[0] | ((size_t)at[1] << 8) | ((size_t)at[2] << 16) | ((size_t)at[3] << 24);
    const unsigned char *id = at + 4, *key = at + 36, *sig = at + 68;
    unsigned char digest[32], index[4];
    secp256k1_sha256 hash;
    secp256k1_fe rx;
    size_t k;
    int overflow;
    /* The id is the hash of the serialization. */
    secp256k1_sha256_initialize(&hash);
    secp256k1_sha256_write(&hash, at + 132, length);
    secp256k1_sha256_finalize(&hash, digest);
    if (secp256k1_memcmp_var(digest, id, 32) != 0) { ok = 0; break; }
    /* The key: summed with the other events of the same key (the last one used, then the
     * others in order). */
    k = n_keys;
    if (n_keys > 0 && secp256k1_memcmp_var(keys[last_key], key, 32) == 0) {
      k = last_key;
    } else {
      size_t j;
      for (j = 0; j < n_keys; j++) if (secp256k1_memcmp_var(keys[j], key, 32) == 0) { k = j; break; }
    }
    if (k == n_keys) {
      secp256k1_xonly_pubkey parsed;
      if (!secp256k1_xonly_pubkey_parse(secp256k1_context_static, &parsed, key) ||
          !secp256k1_xonly_pubkey_load(secp256k1_context_static, &points[count + k], &parsed)) { ok = 0; break; }
      keys[k] = key;
      secp256k1_scalar_set_int(&scalars[count + k], 0);
      n_keys++;
    }
    last_key = k;
    /* R = lift_x(r): the point with x = r and an even y (the one-event check's conditions on
     * the computed R); s below the group order. */
    if (!secp256k1_fe_set_b32_limit(&rx, sig) || !secp256k1_ge_set_xo_var(&points[i], &rx, 0)) { ok = 0; break; }
    secp256k1_scalar_set_b32(&s, sig + 32, &overflow);
    if (overflow) { ok = 0; break; }
    secp256k1_schnorrsig_challenge(&e, sig, id, 32, key);
    /* a_i: 127 bits of SHA-256(seed || i), nonzero. */
    index[0] = (unsigned char)i; index[1] = (unsigned char)(i >> 8);
    index[2] = (unsigned char)(i >> 16); index[3] = (unsigned char)(i >> 24);
    secp256k1_sha256_initialize(&hash);
    secp256k1_sha256_write(&hash, seed, 32);
    secp256k1_sha256_write(&hash, index, 4);
    secp256k1_sha256_finalize(&hash, digest);
    memset(digest, 0, 16);
    digest[16] &= 0x7f;
    secp256k1_scalar_set_b32(&a, digest, NULL);
    if (secp256k1_scalar_is_zero(&a)) { ok = 0; break; }
    /* G: + a_i s_i;  -R_i: + a_i;  P_k: - a_i e_i */
    secp256k1_scalar_mul(&s, &s, &a);
    secp256k1_scalar_add(&g_scalar, &g_scalar, &s);
    secp256k1_ge_neg(&points[i], &points[i]);
    scalars[i] = a;
    secp256k1_scalar_mul(&e, &e, &a);
    secp256k1_scalar_negate(&e, &e);
    secp256k1_scalar_add(&scalars[count + k], &scalars[count + k], &e);
    at += (132 + length + 3) & ~(size_t)3;
  }
  if (ok) {
    size_t n_points = count + n_keys;
    if (buzz_scratch == NULL || buzz_scratch_points < n_points) {
      if (buzz_scratch != NULL) secp256k1_scratch_destroy(&default_error_callback, buzz_scratch);
      buzz_scratch = secp256k1_scratch_create(&default_error_callback,
          secp256k1_pippenger_scratch_size(n_points, PIPPENGER_MAX_BUCKET_WINDOW) + PIPPENGER_SCRATCH_OBJECTS * ALIGNMENT);
      buzz_scratch_points = buzz_scratch == NULL ? 0 : n_points;
    }
    batch.scalars = scalars;
    batch.points = points;
    ok = buzz_scratch != NULL &&
         secp256k1_ecmult_multi_var(&default_error_callback, buzz_scratch, &result, &g_scalar, buzz_batch_point, &batch, n_points) &&
         secp256k1_gej_is_infinity(&result);
  }
done:
  free(scalars);
  free(points);
  free(keys);
  return ok;
}

/*
 * Signing (NIP-98 headers, published events) with the library's schnorrsig_sign32, on a
 * context of its own (created once, blinded with the caller's random seed): each signature is
 * one multiplication of the generator by precomputed tables, where @noble/curves' pure-JS
 * signing measured ~4.6 ms a request here (docs/performance.md).
 */
static secp256k1_context *buzz_signing = NULL;

/* `seed`: 32 bytes from the caller's CSPRNG, for the context's blinding. 1: ready. */
__attribute__((export_name("buzz_sign_init")))
int buzz_sign_init(const unsigned char *seed) {
  if (buzz_signing == NULL) buzz_signing = secp256k1_context_create(SECP256K1_CONTEXT_NONE);
  return buzz_signing != NULL && secp256k1_context_randomize(buzz_signing, seed);
}

/* `at`: the secret key (32 bytes) in; its keypair (96 bytes, the library's own layout) and
 * x-only public key (32) out at at + 32 and at + 128. 0: not a valid secret key. */
__attribute__((export_name("buzz_keypair")))
int buzz_keypair(unsigned char *at) {
  secp256k1_keypair keypair;
  secp256k1_xonly_pubkey pubkey;
  if (buzz_signing == NULL || !secp256k1_keypair_create(buzz_signing, &keypair, at)) return 0;
  if (!secp256k1_keypair_xonly_pub(secp256k1_context_static, &pubkey, NULL, &keypair)) return 0;
  memcpy(at + 32, keypair.data, 96);
  secp256k1_xonly_pubkey_serialize(secp256k1_context_static, at + 128, &pubkey);
  secp256k1_memclear_explicit(&keypair, sizeof(keypair));
  return 1;
}

/* `at`: a keypair (96 bytes, from buzz_keypair), the 32-byte message (the event id) and 32
 * bytes of auxiliary randomness in; the BIP-340 signature (64 bytes) out at at + 160. */
__attribute__((export_name("buzz_sign")))
int buzz_sign(unsigned char *at) {
  secp256k1_keypair keypair;
  int ok;
  if (buzz_signing == NULL) return 0;
  memcpy(keypair.data, at, 96);
  ok = secp256k1_schnorrsig_sign32(buzz_signing, at + 160, at + 96, &keypair, at + 128);
  secp256k1_memclear_explicit(&keypair, sizeof(keypair));
  return ok;
}
