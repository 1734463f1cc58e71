package cri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Client holds one gRPC connection to a CRI endpoint.
type Client struct {
	conn    *grpc.ClientConn
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient
}

// Dial connects to the CRI server on the Unix socket at path. The connection
// is lazy: use WaitReady to know that the runtime answers.
func Dial(path string) (*Client, error) {
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	conn, err := grpc.NewClient("passthrough:///cri",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
	)
	if err != nil {
		return nil, fmt.Errorf("cri: dial %s: %w", path, err)
	}
	return &Client{
		conn:    conn,
		Runtime: runtimeapi.NewRuntimeServiceClient(conn),
		Images:  runtimeapi.NewImageServiceClient(conn),
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("cri: close: %w", err)
	}
	return nil
}

// WaitReady polls the runtime until it reports RuntimeReady or ctx ends. It
// does not wait for NetworkReady: the suite uses host-network pods only.
func (c *Client) WaitReady(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	var lastErr error
	for {
		v, err := c.ready(ctx)
		if err == nil {
			return v, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cri: runtime not ready: %w (last error: %w)", ctx.Err(), lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Client) ready(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := c.Runtime.Version(cctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return nil, fmt.Errorf("version: %w", err)
	}
	st, err := c.Runtime.Status(cctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	for _, cond := range st.GetStatus().GetConditions() {
		if cond.GetType() == runtimeapi.RuntimeReady {
			if cond.GetStatus() {
				return v, nil
			}
			return nil, fmt.Errorf("%w: %s: %s", errNotReady, cond.GetReason(), cond.GetMessage())
		}
	}
	return nil, fmt.Errorf("%w: no RuntimeReady condition", errNotReady)
}

var errNotReady = errors.New("runtime not ready")
