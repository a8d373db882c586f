//! A small Chrome DevTools Protocol driver: enough of it to click through the built-in UI in
//! a real headless Chromium and watch its live parts.
//!
//! `chromium --dump-dom` cannot click, and it never returns on a page that holds a stream
//! open (it waits for virtual time to run out, and an `EventSource` keeps it from ever
//! doing so). Driving the browser over the protocol instead, the test decides when a page
//! is done: it polls an expression until it holds, with a deadline.
//!
//! How it talks: Chromium started with `--remote-debugging-pipe` reads commands from its file
//! descriptor 3 and writes replies and events to its descriptor 4, each message a JSON object
//! ended by a NUL byte. A command is `{"id", "method", "params"}` (plus `"sessionId"` for one
//! page); its reply carries the same `id` and a `result` or an `error`; an event has a
//! `method` and no `id`. One thread reads the replies and hands each to the command waiting
//! for it; events are kept only as far as they explain a failure (console messages, uncaught
//! exceptions, CSP reports).
//!
//! Pages: `Target.createTarget` opens a tab, `Target.attachToTarget` with `flatten` gives a
//! session id that the page's own commands (`Page.*`, `Runtime.*`, `Emulation.*`) carry.
//! `Target.createBrowserContext` makes a separate cookie jar: a signed-out visitor, or a
//! second user, beside the first.
//!
//! Nothing here can hang a test: every command and every wait has a deadline, and the
//! browser's whole process group is killed when [`Browser`] is dropped.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, PipeWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// How long one command may take before the test fails.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`Page::wait_until`] waits unless told otherwise.
pub const WAIT: Duration = Duration::from_secs(20);
/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(75);
/// Console lines kept for failure messages.
const CONSOLE_KEPT: usize = 50;
/// The window every page gets at first: a laptop's ([`Page::width`] changes it).
pub const WIDTH: u32 = 1024;
const HEIGHT: u32 = 800;
/// Screenshots stop at this height (a long log page would otherwise be huge).
const MAX_SHOT_HEIGHT: u32 = 3000;

/// What went wrong talking to the browser.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("the browser is gone (it exited or closed its pipe) while {method} was pending")]
    Closed { method: String },
    #[error("{method} got no reply within {CALL_TIMEOUT:?}")]
    Timeout { method: String },
    #[error("{method} failed: {message}")]
    Protocol { method: String, message: String },
    #[error("the script threw: {0}")]
    Script(String),
    #[error("writing {method} to the browser: {source}")]
    Write {
        method: String,
        source: std::io::Error,
    },
}

type Reply = Result<Value, String>;

/// The pipe to the browser and the commands waiting for their replies.
struct Conn {
    writer: Mutex<PipeWriter>,
    next_id: AtomicU64,
    /// Waiting commands by id; `None` once the browser closed its end.
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<Reply>>>>,
    /// The newest console messages, exceptions and log entries, for failure messages.
    console: Mutex<VecDeque<String>>,
    /// Every problem any page had ([`Browser::problems`]).
    problems: Mutex<Vec<String>>,
}

impl Conn {
    /// Sends `method` (to the page `session`, or to the browser) and waits for its result.
    async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, CdpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self.pending.lock().unwrap().as_mut() {
            Some(pending) => pending.insert(id, tx),
            None => {
                return Err(CdpError::Closed {
                    method: method.into(),
                });
            }
        };
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).expect("a JSON value serialises");
        bytes.push(0);
        self.writer
            .lock()
            .unwrap()
            .write_all(&bytes)
            .map_err(|source| CdpError::Write {
                method: method.into(),
                source,
            })?;
        match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Err(_) => Err(CdpError::Timeout {
                method: method.into(),
            }),
            Ok(Err(_)) => Err(CdpError::Closed {
                method: method.into(),
            }),
            Ok(Ok(Err(message))) => Err(CdpError::Protocol {
                method: method.into(),
                message,
            }),
            Ok(Ok(Ok(result))) => Ok(result),
        }
    }

    /// One message from the browser: a reply goes to its command, an event worth keeping to
    /// the console buffer.
    fn dispatch(&self, raw: &[u8]) {
        let Ok(msg) = serde_json::from_slice::<Value>(raw) else {
            return;
        };
        if let Some(id) = msg["id"].as_u64() {
            let reply = match msg.get("error") {
                Some(e) => Err(e["message"].as_str().unwrap_or("unknown error").to_string()),
                None => Ok(msg["result"].clone()),
            };
            let waiting = self
                .pending
                .lock()
                .unwrap()
                .as_mut()
                .and_then(|p| p.remove(&id));
            if let Some(tx) = waiting {
                let _ = tx.send(reply);
            }
            return;
        }
        let p = &msg["params"];
        // A problem is what a page should never do: throw, log an error, break a rule of its
        // CSP, crash. A failed request (a 404 favicon, a 401 page) is not one.
        let mut problem = true;
        let line = match msg["method"].as_str() {
            Some("Runtime.consoleAPICalled") => {
                let args: Vec<String> = p["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        a["value"]
                            .as_str()
                            .map_or_else(|| a["description"].to_string(), String::from)
                    })
                    .collect();
                let kind = p["type"].as_str().unwrap_or("?");
                problem = kind == "error" || kind == "assert";
                format!("console.{kind}: {}", args.join(" "))
            }
            Some("Runtime.exceptionThrown") => {
                let d = &p["exceptionDetails"];
                format!("uncaught: {} {}", d["text"], d["exception"]["description"])
            }
            Some("Log.entryAdded") => {
                let e = &p["entry"];
                problem = e["level"] == "error" && e["source"] != "network";
                format!("{} {}: {} {}", e["source"], e["level"], e["text"], e["url"])
            }
            Some("Inspector.targetCrashed") => "the page crashed".to_string(),
            _ => return,
        };
        if problem {
            self.problems.lock().unwrap().push(line.clone());
        }
        let mut console = self.console.lock().unwrap();
        if console.len() == CONSOLE_KEPT {
            console.pop_front();
        }
        console.push_back(line);
    }

    /// The browser closed its end: every waiting command fails now, later ones at once.
    fn close(&self) {
        self.pending.lock().unwrap().take();
    }

    fn console(&self) -> String {
        let console = self.console.lock().unwrap();
        if console.is_empty() {
            return "(nothing)".into();
        }
        console.iter().cloned().collect::<Vec<_>>().join("\n  ")
    }
}

/// A headless Chromium, killed (with everything it started) when dropped.
pub struct Browser {
    child: Child,
    conn: Arc<Conn>,
    /// The profile and the browser's stderr live here until the browser is gone.
    dir: tempfile::TempDir,
}

/// A separate cookie jar and cache (`Target.createBrowserContext`), like a private window.
pub struct Context(String);

/// Debian's Chromium, or `None` where it is not installed.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

impl Browser {
    /// Starts headless Chromium with a fresh profile; `None` when Chromium is not installed.
    pub fn launch() -> Option<Browser> {
        let exe = chromium()?;
        let dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        // Ours: write commands to `to_browser`, read replies from `from_browser`. The other ends
        // become the child's descriptors 3 and 4.
        let (their_in, to_browser) = std::io::pipe().unwrap();
        let (from_browser, their_out) = std::io::pipe().unwrap();
        let (fd_in, fd_out) = (their_in.as_raw_fd(), their_out.as_raw_fd());
        let mut command = Command::new(exe);
        command
            .args([
                "--headless=new",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                // A tab in the background keeps running its timers and streams as in front.
                "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows",
            ])
            .arg(format!(
                "--user-data-dir={}",
                dir.path().join("profile").display()
            ))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            // Its own process group, so that drop can kill the renderers with it.
            .process_group(0);
        // SAFETY: between fork and exec only async-signal-safe calls (fcntl, dup2). The pipe
        // ends are first copied above 10 (close-on-exec), so that placing them at 3 and 4
        // cannot overwrite one with the other; dup2 clears close-on-exec on 3 and 4 only.
        unsafe {
            command.pre_exec(move || {
                let a = libc::fcntl(fd_in, libc::F_DUPFD_CLOEXEC, 10);
                let b = libc::fcntl(fd_out, libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {exe}: {e}"));
        // Only the child holds these now: its exit closes the pipe and ends the reader.
        drop((their_in, their_out));
        let conn = Arc::new(Conn {
            writer: Mutex::new(to_browser),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(Some(HashMap::new())),
            console: Mutex::new(VecDeque::new()),
            problems: Mutex::new(Vec::new()),
        });
        let reader = conn.clone();
        std::thread::spawn(move || {
            let mut from = BufReader::new(from_browser);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match from.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if buf.last() == Some(&0) {
                            buf.pop();
                        }
                        reader.dispatch(&buf);
                    }
                }
            }
            reader.close();
        });
        Some(Browser { child, conn, dir })
    }

    /// A new cookie jar: pages opened in it share nothing with the others.
    pub async fn new_context(&self) -> Context {
        let r = self
            .conn
            .call(
                None,
                "Target.createBrowserContext",
                json!({"disposeOnDetach": true}),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}; {}", self.stderr_tail()));
        Context(r["browserContextId"].as_str().unwrap().to_string())
    }

    /// A new tab at `about:blank`, in `context` or the default one.
    pub async fn new_page(&self, context: Option<&Context>) -> Page {
        let mut params = json!({"url": "about:blank"});
        if let Some(Context(id)) = context {
            params["browserContextId"] = json!(id);
        }
        let fail = |e: CdpError| panic!("opening a page: {e}; {}", self.stderr_tail());
        let target = self
            .conn
            .call(None, "Target.createTarget", params)
            .await
            .unwrap_or_else(fail);
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = self
            .conn
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
            )
            .await
            .unwrap_or_else(fail);
        let page = Page {
            conn: self.conn.clone(),
            session: attached["sessionId"].as_str().unwrap().to_string(),
            width: AtomicU32::new(WIDTH),
        };
        for method in ["Page.enable", "Runtime.enable", "Log.enable"] {
            page.call(method, json!({})).await;
        }
        page.width(WIDTH).await;
        page
    }

    /// What went wrong in any page so far: uncaught exceptions, `console.error`, errors the
    /// browser logged other than failed requests (a CSP violation among them), crashes.
    pub fn problems(&self) -> Vec<String> {
        self.conn.problems.lock().unwrap().clone()
    }

    /// The end of the browser's stderr, for a failure message.
    fn stderr_tail(&self) -> String {
        let all = std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = all.lines().filter(|l| !l.contains("dbus")).collect();
        format!(
            "browser stderr: {}",
            lines[lines.len().saturating_sub(10)..].join("\n")
        )
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The group is the one `launch` made (its id is the child's pid): the browser and its
        // renderers, nothing else.
        let group = self.child.id() as i32;
        // SAFETY: kill(2) with a negative pid signals that process group only.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// One tab, driven through its session.
pub struct Page {
    conn: Arc<Conn>,
    session: String,
    /// The window's width in CSS pixels.
    width: AtomicU32,
}

impl Page {
    /// A command to this page; a failure fails the test with what the page logged.
    async fn call(&self, method: &str, params: Value) -> Value {
        self.try_call(method, params)
            .await
            .unwrap_or_else(|e| panic!("{e}\n  console: {}", self.conn.console()))
    }

    async fn try_call(&self, method: &str, params: Value) -> Result<Value, CdpError> {
        self.conn.call(Some(&self.session), method, params).await
    }

    /// Evaluates `expression` in the page (a promise is awaited) and returns its value as
    /// JSON (`null` for `undefined`); an exception is an error.
    pub async fn try_eval(&self, expression: &str) -> Result<Value, CdpError> {
        let r = self
            .try_call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(d) = r.get("exceptionDetails") {
            let what = d["exception"]["description"]
                .as_str()
                .or(d["text"].as_str())
                .unwrap_or("?");
            return Err(CdpError::Script(what.to_string()));
        }
        Ok(r["result"]["value"].clone())
    }

    /// [`Page::try_eval`], failing the test on an error.
    pub async fn eval(&self, expression: &str) -> Value {
        self.try_eval(expression)
            .await
            .unwrap_or_else(|e| panic!("{expression}: {e}\n  console: {}", self.conn.console()))
    }

    /// Polls `expression` until it is truthy (not `false`, `null`, `0` or `""`) and returns
    /// its value; after `within`, fails the test with the last value or error seen. An error
    /// while polling (a page between two documents has no context to evaluate in) is only a
    /// "not yet".
    pub async fn wait_until_within(&self, within: Duration, what: &str, expression: &str) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let last = match self.try_eval(expression).await {
                Ok(v) if truthy(&v) => return v,
                Ok(v) => format!("{v}"),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                let url = self.try_eval("location.href").await.map(|v| v.to_string());
                let body = self
                    .try_eval("document.body ? document.body.innerText.slice(0, 2000) : ''")
                    .await
                    .map(|v| v.as_str().unwrap_or_default().to_string());
                panic!(
                    "waited {within:?} for {what} ({expression}); last seen: {last}\n  at: {url:?}\n  \
                     page text: {body:?}\n  console: {}",
                    self.conn.console()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// [`Page::wait_until_within`] the usual [`WAIT`].
    pub async fn wait_until(&self, what: &str, expression: &str) -> Value {
        self.wait_until_within(WAIT, what, expression).await
    }

    /// Opens `url` and waits until its document has loaded.
    pub async fn goto(&self, url: &str) {
        self.leaving().await;
        let r = self.call("Page.navigate", json!({"url": url})).await;
        if let Some(e) = r["errorText"].as_str().filter(|e| !e.is_empty()) {
            panic!("navigating to {url}: {e}");
        }
        self.arrived(url).await;
    }

    /// Clicks `selector` (the first match) and waits for the document it leads to, as a
    /// submit button's form post and the redirect after it.
    pub async fn click_to_navigate(&self, selector: &str) {
        self.leaving().await;
        self.click(selector).await;
        self.arrived(&format!("the page after clicking {selector}"))
            .await;
    }

    /// Marks the current document, so that [`Page::arrived`] can tell a new one from it.
    async fn leaving(&self) {
        self.eval("window.__cdpLeft = true").await;
    }

    async fn arrived(&self, what: &str) {
        self.wait_until(
            &format!("{what} to load"),
            "!window.__cdpLeft && document.readyState === 'complete'",
        )
        .await;
    }

    /// Clicks the first element `selector` matches (`element.click()`: a button submits its
    /// form, a link is followed, a box is ticked).
    pub async fn click(&self, selector: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); \
             if (!e) throw new Error('nothing matches ' + {sel}); e.click(); return true; }})()"
        ))
        .await;
    }

    /// Types `value` into the input or text area `selector`, firing `input` and `change` as
    /// typing does.
    pub async fn fill(&self, selector: &str, value: &str) {
        let (sel, value) = (
            serde_json::to_string(selector).unwrap(),
            serde_json::to_string(value).unwrap(),
        );
        self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); \
             if (!e) throw new Error('nothing matches ' + {sel}); e.focus(); e.value = {value}; \
             e.dispatchEvent(new Event('input', {{bubbles: true}})); \
             e.dispatchEvent(new Event('change', {{bubbles: true}})); return true; }})()"
        ))
        .await;
    }

    /// The text of the first element `selector` matches ("" when none does).
    pub async fn text(&self, selector: &str) -> String {
        let sel = serde_json::to_string(selector).unwrap();
        self.eval(&format!(
            "(document.querySelector({sel}) || {{}}).textContent || ''"
        ))
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// The whole document as HTML, with every field's current value appended (a typed value
    /// is not in the markup).
    pub async fn html_and_values(&self) -> String {
        self.eval(
            "document.documentElement.outerHTML + '\\n' + \
             [...document.querySelectorAll('input, textarea')].map(e => e.value).join('\\n')",
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// The path and query of the current document.
    pub async fn path(&self) -> String {
        self.eval("location.pathname + location.search")
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Makes the window `width` CSS pixels wide (a phone's is about 400), as a device of
    /// that width would be: the page lays itself out again.
    pub async fn width(&self, width: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": width < 600}),
        )
        .await;
        self.width.store(width, Ordering::Relaxed);
    }

    /// Presses Tab, as a keyboard user moves to the next control.
    pub async fn press_tab(&self) {
        for kind in ["keyDown", "keyUp"] {
            self.call(
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9}),
            )
            .await;
        }
    }

    /// What `prefers-color-scheme` answers from now on: `"light"` or `"dark"`.
    pub async fn color_scheme(&self, scheme: &str) {
        self.call(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        )
        .await;
    }

    /// Saves the whole page (up to a height limit) as a PNG at `path`; returns its bytes.
    /// The tab is brought to the front first: a tab behind another draws no frames, and
    /// its screenshot would never come.
    pub async fn screenshot(&self, path: &Path) -> Vec<u8> {
        self.call("Page.bringToFront", json!({})).await;
        let height = self
            .eval("Math.ceil(document.documentElement.scrollHeight)")
            .await
            .as_u64()
            .unwrap_or(HEIGHT.into())
            .clamp(1, MAX_SHOT_HEIGHT.into());
        let r = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true,
                       "clip": {"x": 0, "y": 0, "width": self.width.load(Ordering::Relaxed),
                                "height": height, "scale": 1}}),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("a screenshot's data"))
            .expect("a screenshot is base64");
        std::fs::write(path, &png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        png
    }
}

/// JavaScript's truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}
