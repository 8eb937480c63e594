// The system's libcrypto (OpenSSL), for the digests swift-crypto does not offer: BagIt
// manifests may be in SHA-224, which bagit-python accepts.
#include <openssl/evp.h>
