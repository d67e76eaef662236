"""Each upstream's wire vocabulary, in one module each: paths, versions, encodings, ids, label names — what the
mounts, the upstream clients, the store's APIs, the resolver and the tests' doubles all speak."""
