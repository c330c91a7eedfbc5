"""The mutating admission webhook's HTTPS server (`nri-podlevel webhook`); what it answers is decided by
`podspec.admission`, which this package only carries over TLS."""
