package supervisor

import "bytes"

// A closing connection (docs/DESIGN.md §2.8): when the head the dispatcher
// already checked says that the connection ends with this request, the
// dispatcher gives its copy of the descriptor up with the Dispatch (the
// channel closes it once sent) and only counts the slot back at the Done.
// The connection costs the supervisor no re-arm, no shutdown and no close
// at the Done, and the client gets its FIN as soon as the worker closes.
//
// The look at the head stays one of bytes, as forwardedFor's: the request
// line's version and the Connection fields' tokens, by the rule the
// worker's parser applies (httphead.Head.Persistent), and nothing else. It
// is conservative: a head with a body (Content-Length, Transfer-Encoding),
// with bytes after it, a folded line, or anything it does not recognise
// keeps the supervisor's copy, and the round ends as any other. A head it
// wrongly took for a closing one (a worker that keeps the connection alive
// after all) costs that connection its next request: with no copy left,
// the dispatcher closes it at the Done whatever it says.

// closingHead reports whether head, a complete request head and all the
// input there is, asks for the connection to close after its response
// and declares no body: HTTP/1.0 without a keep-alive token, or any
// version with a close token in a Connection field.
func closingHead(head []byte) bool {
	first := true
	v10, closes, keepAlive := false, false, false
	// A head is at most headend.MaxHead bytes, so this loop is bounded.
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			return false
		}
		line := bytes.TrimSuffix(head[:i], []byte{'\r'})
		head = head[i+1:]
		switch {
		case len(line) == 0 && first:
			continue // an empty line before the request line
		case len(line) == 0:
			return len(head) == 0 && (closes || v10 && !keepAlive)
		case first:
			first = false
			v10 = bytes.HasSuffix(line, []byte(" HTTP/1.0"))
			continue
		case line[0] == ' ' || line[0] == '\t':
			return false // obs-fold: the worker refuses it; not ours to judge
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return false
		}
		name := line[:colon]
		switch {
		case bytes.EqualFold(name, []byte("content-length")), bytes.EqualFold(name, []byte("transfer-encoding")):
			return false
		case !bytes.EqualFold(name, []byte("connection")):
			continue
		}
		for tok := range bytes.SplitSeq(line[colon+1:], []byte(",")) {
			tok = bytes.Trim(tok, " \t")
			switch {
			case bytes.EqualFold(tok, []byte("close")):
				closes = true
			case bytes.EqualFold(tok, []byte("keep-alive")):
				keepAlive = true
			}
		}
	}
	return false
}
