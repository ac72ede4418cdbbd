package secrets

import (
	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// Htpasswd is the htpasswd entries of cfg's basic auth for a worker's
// Hello, one message per file: workers cannot open the files, the
// supervisor's configuration read them (at start, and on every reload, so
// a changed file replaces the workers).
func Htpasswd(cfg *config.Config) []*proto.HtpasswdFile {
	var files []*proto.HtpasswdFile
	seen := map[string]bool{}
	for _, r := range cfg.Routes {
		a := r.BasicAuth
		if a == nil || seen[a.File] {
			continue
		}
		seen[a.File] = true
		f := &proto.HtpasswdFile{File: a.File}
		for _, u := range a.Users {
			f.Users = append(f.Users, &proto.HtpasswdUser{Name: u.Name, Hash: u.Hash})
		}
		files = append(files, f)
	}
	return files
}
