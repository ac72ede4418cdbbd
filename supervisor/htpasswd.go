package supervisor

import (
	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
)

// htpasswdFiles are the htpasswd entries for a worker's Hello, one message
// per file: workers cannot open the files, the configuration read them
// (at start, and on every reload, so a changed file replaces the workers).
func htpasswdFiles(cfg *config.Config) []*proto.HtpasswdFile {
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
