package worker

import (
	"io"
	"os"
)

// ReadFrom lets http.ServeContent's copy of a file body go out with
// sendfile(2) where the platform has it (see sendFile); anything else is
// copied through Write.
func (r *response) ReadFrom(src io.Reader) (int64, error) {
	if f, n := fileSource(src); f != nil {
		if sent, handled, err := r.sendFile(f, n); handled {
			if lr, ok := src.(*io.LimitedReader); ok {
				lr.N -= sent
			}
			return sent, err
		}
	}
	return io.Copy(writerOnly{r}, src)
}

// fileSource returns the file behind src and how many bytes of it src
// yields at most, or nil.
func fileSource(src io.Reader) (*os.File, int64) {
	switch s := src.(type) {
	case *os.File:
		return s, 1<<63 - 1
	case *io.LimitedReader:
		if f, ok := s.R.(*os.File); ok {
			return f, s.N
		}
	}
	return nil, 0
}

// writerOnly hides response's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }
