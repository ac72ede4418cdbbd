package worker

import (
	"net/http"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/proto"
	"github.com/gatehouse-dev/gatehouse/worker/access"
)

// newMetrics serves the supervisor's metrics to allowed client addresses.
// The worker fetches them over its channel: the supervisor never parses HTTP.
func (w *Worker) newMetrics(cfg *config.Metrics) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !access.PeerIn(cfg.Allow, r.RemoteAddr) {
			http.Error(rw, "403 forbidden", http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rep, err := w.calls.call(r.Context(), &proto.Frame{Body: &proto.Frame_StatsRequest{StatsRequest: &proto.StatsRequest{}}}, nil)
		if err != nil {
			rw.Header().Set("Retry-After", "1")
			http.Error(rw, "503 metrics unavailable", http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		rw.Write(rep.f.GetStatsReply().GetText())
	})
}
