/*
 * The one function buzz-sync-js calls in WebAssembly: check a Nostr event's id and BIP-340
 * signature with libsecp256k1 (bitcoin-core/secp256k1, the library coincurve and so buzz-sync
 * use), compiled in one unit with this file by build.sh. Nothing here is cryptography of its
 * own: the hash is libsecp256k1's SHA-256, the check its schnorrsig module, on the static
 * (verification-only) context.
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
