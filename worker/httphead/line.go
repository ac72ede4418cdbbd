package httphead

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// errLineTooLong is readLine's internal signal that a line exceeded its
// bound; callers turn it into the *Error for their context.
var errLineTooLong = errors.New("httphead: line too long")

// readLine returns the next line of r including its LF. The line is at most
// max bytes long; a longer one returns errLineTooLong with a prefix of the
// line (at least its first 32 bytes when it has them) for diagnosis.
//
// readLine works with any buffer size of r: fragments returned by
// ReadSlice with bufio.ErrBufferFull are accumulated in *scratch, which
// therefore never grows past max plus one fragment. The returned slice
// aliases r's buffer or *scratch and is valid only until the next read.
//
// At end of input it returns the partial line (possibly empty) and io.EOF.
// Other read errors are returned as they are, with the partial line.
func readLine(r *bufio.Reader, max int, scratch *[]byte) ([]byte, error) {
	acc := (*scratch)[:0]
	defer func() { *scratch = acc[:0] }()
	for {
		frag, err := r.ReadSlice('\n')
		if len(acc)+len(frag) > max {
			if len(acc) == 0 {
				return frag, errLineTooLong
			}
			acc = append(acc, excerpt(frag, 32)...)
			return acc, errLineTooLong
		}
		switch err {
		case nil:
			if len(acc) == 0 {
				return frag, nil
			}
			acc = append(acc, frag...)
			return acc, nil
		case bufio.ErrBufferFull:
			acc = append(acc, frag...)
		default:
			acc = append(acc, frag...)
			return acc, err
		}
	}
}

// lineContent checks the ending of a complete line read by readLine and
// returns the line without its CRLF.
//
// RFC 9112 §2.2 lets a recipient accept a bare LF as a line terminator;
// gatehouse does not, because a front end that splits lines differently
// from the application behind it is the classic request-smuggling setup.
// The same section says a bare CR must be rejected or replaced by SP; we
// reject it, and NUL too (RFC 9110 §5.5).
func lineContent(line []byte) ([]byte, *Error) {
	n := len(line)
	if n < 2 || line[n-2] != '\r' {
		return nil, newError(CodeBareLF, "line ends in LF without CR")
	}
	content := line[:n-2]
	if i := bytes.IndexByte(content, 0); i >= 0 {
		return nil, newError(CodeNULByte, fmt.Sprintf("NUL at offset %d of a line", i))
	}
	if i := bytes.IndexByte(content, '\r'); i >= 0 {
		return nil, newError(CodeBareCR, fmt.Sprintf("CR not followed by LF at offset %d of a line", i))
	}
	return content, nil
}

// readError converts a read error in the middle of a message into the error
// ReadHead and the chunked reader return: io.ErrUnexpectedEOF for a clean
// end of input, and anything else wrapped so that errors.As still finds a
// net.Error (a deadline, say) under it.
func readError(what string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading %s: %w", what, err)
}
