// A test MCP backend that reads requests the way Go MCP servers built on encoding/json do
// (mark3labs/mcp-go's HandleMessage: the message decoded into a struct for jsonrpc, method
// and id, then again into the method's request struct; a tool handler binding its arguments
// into a struct of its own). encoding/json matches struct fields to object keys without case,
// by Unicode simple folding, and the last matching key wins. Standard library only, so CI
// builds it offline. It answers Streamable HTTP POSTs with JSON, and records every tool it ran
// (GET /calls), so a test can tell what a request made it do.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"sync"
	"unicode"
)

// What mcp-go reads first of every message.
type baseMessage struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	ID      any    `json:"id,omitempty"`
}

// What mcp-go reads of a tools/call (mcp.CallToolRequest).
type callToolRequest struct {
	Params struct {
		Name      string         `json:"name"`
		Arguments any            `json:"arguments,omitempty"`
		Meta      map[string]any `json:"_meta,omitempty"`
	} `json:"params"`
}

// The arguments a tool handler binds (mcp-go's BindArguments: marshal, then unmarshal into
// the handler's struct).
type repoArgs struct {
	Owner  string `json:"owner"`
	Repo   string `json:"repo"`
	Branch string `json:"branch"`
	Title  string `json:"title"`
	Key    string `json:"key"`
}

// One tool the backend ran.
type call struct {
	Tool      string   `json:"tool"`
	Arguments repoArgs `json:"arguments"`
}

var (
	mu    sync.Mutex
	calls []call
)

var tools = []map[string]any{
	{"name": "get_me", "description": "who the token belongs to", "inputSchema": map[string]any{"type": "object"}},
	{"name": "create_branch", "description": "creates a branch", "inputSchema": map[string]any{"type": "object"}},
	{"name": "create_issue", "description": "opens an issue", "inputSchema": map[string]any{"type": "object"}},
	{"name": "set_deploy_key", "description": "adds a deploy key", "inputSchema": map[string]any{"type": "object"}},
}

func reply(w http.ResponseWriter, id any, result any, rpcErr map[string]any) {
	msg := map[string]any{"jsonrpc": "2.0", "id": id}
	if rpcErr != nil {
		msg["error"] = rpcErr
	} else {
		msg["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(msg)
}

func handle(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/calls" {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(calls)
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var base baseMessage
	if err := json.Unmarshal(body, &base); err != nil {
		reply(w, nil, nil, map[string]any{"code": -32700, "message": "Failed to parse message"})
		return
	}
	if base.ID == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	switch base.Method {
	case "initialize":
		var req struct {
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &req)
		reply(w, base.ID, map[string]any{
			"protocolVersion": req.Params.ProtocolVersion,
			"capabilities":    map[string]any{"tools": map[string]any{}},
			"serverInfo":      map[string]any{"name": "go-backend", "version": "1"},
		}, nil)
	case "ping":
		reply(w, base.ID, map[string]any{}, nil)
	case "tools/list":
		reply(w, base.ID, map[string]any{"tools": tools}, nil)
	case "tools/call":
		var req callToolRequest
		if err := json.Unmarshal(body, &req); err != nil {
			reply(w, base.ID, nil, map[string]any{"code": -32600, "message": err.Error()})
			return
		}
		var args repoArgs
		if raw, err := json.Marshal(req.Params.Arguments); err == nil {
			_ = json.Unmarshal(raw, &args)
		}
		mu.Lock()
		calls = append(calls, call{Tool: req.Params.Name, Arguments: args})
		mu.Unlock()
		text := fmt.Sprintf("ran %s for %s/%s", req.Params.Name, args.Owner, args.Repo)
		reply(w, base.ID, map[string]any{
			"content": []map[string]any{{"type": "text", "text": text}},
			"isError": false,
		}, nil)
	default:
		reply(w, base.ID, nil, map[string]any{"code": -32601, "message": "Method " + base.Method + " not found"})
	}
}

// smallestFold is the smallest rune of r's Unicode simple folding orbit.
func smallestFold(r rune) rune {
	min := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < min {
			min = f
		}
	}
	return min
}

// foldTable prints "R F" (decimal) for every rune R that encoding/json matches to a field
// named F, the smallest rune of R's folding orbit, whenever F differs from R: what the
// decoder itself does, checked by decoding {"R":1} into a struct whose field is tagged F.
func foldTable() {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		f := smallestFold(r)
		if f == r {
			continue
		}
		typ := reflect.StructOf([]reflect.StructField{{
			Name: "F",
			Type: reflect.TypeOf(0),
			Tag:  reflect.StructTag(fmt.Sprintf("json:%q", string(f))),
		}})
		v := reflect.New(typ)
		key, _ := json.Marshal(string(r))
		if err := json.Unmarshal([]byte(fmt.Sprintf("{%s:1}", key)), v.Interface()); err != nil || v.Elem().Field(0).Int() != 1 {
			fmt.Printf("nomatch %d %d\n", r, f)
			continue
		}
		fmt.Printf("%d %d\n", r, f)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	table := flag.Bool("fold-table", false, "print how encoding/json folds keys, then exit")
	flag.Parse()
	if *table {
		foldTable()
		return
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The test reads the address from the first line.
	fmt.Printf("listening on %s\n", ln.Addr())
	_ = os.Stdout.Sync()
	if err := http.Serve(ln, http.HandlerFunc(handle)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
