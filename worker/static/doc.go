// Package static serves files below a document root the way an nginx
// operator expects: the Content-Type comes from the file's extension only
// (never from its content), ETags are strong, precompressed ".br"/".gz"
// siblings are served to clients that accept them, a directory named without
// its trailing slash is redirected first, and Range requests are normalized
// (merged and capped) before they are answered.
//
// Every name is resolved through an [os.Root] opened before the worker's
// sandbox closed, so nothing outside the root can be reached, symlinks
// included. A request never causes a 500 by what it names: a bad path is
// 400, a missing one 404, one the root refuses 403.
//
// It is not a general file server: no directory writes, no content
// negotiation beyond the precompressed siblings, no on-the-fly compression.
package static
