//! Raw MCP 2026-07-28 `tools/call` requests over HTTP, as a client without an SDK sends them:
//! the JSON-RPC body with the request's `_meta` (protocol version, client info, no
//! capabilities) and the headers the streamable HTTP transport requires
//! (`mcp-protocol-version`, `mcp-method`, `mcp-name`). One builder for every test that
//! needs the wire itself (status codes, headers, a stalled reader, a dropped connection).

use serde_json::{Value, json};

/// One `tools/call` request.
#[derive(Clone, Debug)]
pub struct RawCall {
    tool: String,
    arguments: Value,
    id: u64,
    token: Option<String>,
    headers: Vec<(String, String)>,
}

impl RawCall {
    /// A call of `tool` with `arguments`, JSON-RPC id 1, no bearer token.
    pub fn new(tool: &str, arguments: Value) -> RawCall {
        RawCall {
            tool: tool.to_owned(),
            arguments,
            id: 1,
            token: None,
            headers: Vec::new(),
        }
    }

    /// `run_select_query` of `sql` with `format: json`.
    pub fn select(sql: &str) -> RawCall {
        RawCall::new("run_select_query", json!({"sql": sql, "format": "json"}))
    }

    /// The JSON-RPC id.
    pub fn id(mut self, id: u64) -> RawCall {
        self.id = id;
        self
    }

    /// Sends `token` as a bearer token.
    pub fn bearer(mut self, token: &str) -> RawCall {
        self.token = Some(token.to_owned());
        self
    }

    /// Sends `token` as a bearer token when given.
    pub fn bearer_opt(self, token: Option<&str>) -> RawCall {
        match token {
            Some(token) => self.bearer(token),
            None => self,
        }
    }

    /// An extra request header.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> RawCall {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// The JSON-RPC request.
    pub fn body(&self) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id, "method": "tools/call", "params": {
            "name": self.tool, "arguments": self.arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }})
    }

    /// Every header of the request but `host` and `content-length`, in sending order.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut headers = Vec::new();
        if let Some(token) = &self.token {
            headers.push(("authorization".to_owned(), format!("Bearer {token}")));
        }
        for (name, value) in [
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
        ] {
            headers.push((name.to_owned(), value.to_owned()));
        }
        headers.push(("mcp-name".to_owned(), self.tool.clone()));
        headers.extend(self.headers.iter().cloned());
        headers
    }

    /// The whole HTTP/1.1 request to `path` on `host`, for tests that write the socket
    /// themselves.
    pub fn http1(&self, host: &str, path: &str) -> String {
        let body = self.body().to_string();
        let mut text = format!("POST {path} HTTP/1.1\r\nhost: {host}\r\n");
        for (name, value) in self.headers() {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        text
    }

    /// The request, ready to send with `http`.
    pub fn request(&self, http: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
        let mut request = http.post(url).body(self.body().to_string());
        for (name, value) in self.headers() {
            request = request.header(name, value);
        }
        request
    }

    /// Sends the request with `http`.
    pub async fn send(
        &self,
        http: &reqwest::Client,
        url: &str,
    ) -> reqwest::Result<reqwest::Response> {
        self.request(http, url).send().await
    }

    /// Sends the request, expects HTTP 200 and returns the JSON-RPC reply.
    pub async fn reply(&self, http: &reqwest::Client, url: &str) -> Value {
        let response = self.send(http, url).await.expect("the request is sent");
        assert_eq!(response.status(), 200, "{:?}", response.headers());
        response.json().await.expect("a JSON-RPC reply")
    }
}
