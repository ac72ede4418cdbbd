package cluster

import (
	"context"

	"github.com/gatehouse-dev/gatehouse/config"
)

type ticketCustody struct{}

func newTicketCustody(cfg *config.Cluster) (*ticketCustody, error) { return &ticketCustody{}, nil }

func (t *ticketCustody) tick(ctx context.Context, s *Store) error { return nil }
