import APNSWire
import CampaignHTTP2
import CampaignIO
import CampaignTLS
import GatewayClient

/// A client of the channel management API (`apns-broadcast.md` §1): one
/// HTTP/2 connection over TLS (through a proxy when given), opened as a
/// send's are (``GatewayEndpoint``), one request at a time, each with its
/// own `apns-request-id`; its pauses and its waits for answers are on a send's clock (``SendClock``). Transient failures (429, 5xx,
/// a lost connection, an answer that does not come) are retried after a
/// growing backoff, never sooner than `retry-after`; everything else is
/// thrown as a ``ChannelError`` at once. Every wait has a deadline and
/// watches `stop`; a request already sent when the stop comes still gets up
/// to ``Configuration/stopGraceSeconds`` for its answer, so a channel it
/// created is not lost track of.
public final class ChannelManagementClient {
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        public var bundleID: String
        public var proxy: HTTPProxy?
        /// The limit of the TCP connect, the proxy's tunnel and the TLS handshake together.
        public var connectTimeoutSeconds = 10.0
        /// How long an answer may take once the request is written.
        public var answerTimeoutSeconds = 30.0
        /// Attempts of one request through transient failures (the first and the retries).
        public var maxAttempts = 5
        /// The first backoff; each retry doubles it, up to ``maxBackoffSeconds``.
        public var backoffSeconds = 0.5
        public var maxBackoffSeconds = 30.0
        /// How long, after a stop, the answer to a request already sent is awaited.
        public var stopGraceSeconds = 5.0

        public init(host: String, port: Int, bundleID: String, proxy: HTTPProxy? = nil) {
            (self.host, self.port, self.bundleID, self.proxy) = (host, port, bundleID, proxy)
        }
    }

    /// One answer that succeeded, with its request id.
    public struct Reply: Equatable, Sendable {
        public var outcome: ChannelOutcome
        public var requestID: String?
    }

    public let configuration: Configuration
    private let endpoint: GatewayEndpoint
    private let clock: SendClock
    private let tokens: ProviderTokenSource?
    private let stop: CancellationPipe
    /// Lines for standard error: retries, as they happen.
    public let log: (String) -> Void

    /// The connection's life: none yet (or dropped after a failure), or open with its HTTP/2 session.
    private enum Link {
        case closed
        case open(TLSConnection, H2Session)
    }
    private var link = Link.closed

    /// - Parameter tokens: token authentication; nil with a client certificate (in `context`).
    public convenience init(configuration: Configuration, context: TLSContext, tokens: ProviderTokenSource?, stop: CancellationPipe,
                            log: @escaping (String) -> Void = { _ in }) {
        self.init(configuration: configuration, context: context, tokens: tokens, stop: stop, clock: SystemClock.shared, log: log)
    }

    /// - Parameter clock: where the backoffs between attempts pass (a test's clock in a test).
    package init(configuration: Configuration, context: TLSContext, tokens: ProviderTokenSource?, stop: CancellationPipe,
                 clock: SendClock, log: @escaping (String) -> Void = { _ in }) {
        (self.configuration, self.tokens, self.stop, self.clock, self.log) = (configuration, tokens, stop, clock, log)
        endpoint = GatewayEndpoint(host: configuration.host, port: configuration.port, context: context, proxy: configuration.proxy,
                                   handshakeSeconds: configuration.connectTimeoutSeconds)
    }

    deinit { close() }

    public func close() {
        if case .open(let connection, _) = link { connection.close() }
        link = .closed
    }

    /// Whether a stop was asked for: the caller sends nothing more.
    public var isStopping: Bool { stop.isCancelled }

    /// Performs `operation`, retrying transient failures; its outcome, or the error that ended it.
    public func perform(_ operation: ChannelOperation) throws(ChannelError) -> Reply {
        do { return try attempts(operation) } catch var error {
            error.gateway = error.gateway ?? authority
            throw error
        }
    }

    /// `host` or, when the port is not HTTPS's 443, `host:port`: the `:authority` of every request and the server's name in sentences.
    package var authority: String { configuration.port == 443 ? configuration.host : "\(configuration.host):\(configuration.port)" }

    private func attempts(_ operation: ChannelOperation) throws(ChannelError) -> Reply {
        var attempt = 0
        var backoff = configuration.backoffSeconds
        while true {
            guard !stop.isCancelled else { throw ChannelError(.stopped) }
            attempt += 1
            let failure: String
            var floor = 0.0
            var requestID: String?
            switch try exchange(operation) {
            case .answered(let answer):
                switch answer.outcome(of: operation) {
                case .success(let outcome): return Reply(outcome: outcome, requestID: answer.requestID)
                case .failure(let error):
                    guard error.answerClass == .transient else { throw error }
                    failure = "\(answer.status) \(answer.reason?.name ?? "(no reason)")"
                    floor = Double(answer.retryAfterSeconds ?? 0)
                    requestID = answer.requestID
                }
            case .lost(let why, let maybeProcessed):
                // A create may have made a channel whose id never came back:
                // sending it again blindly could leave one nobody knows of.
                // The caller finds out from a list (``ChannelRuns/create``).
                if maybeProcessed, case .create = operation { throw ChannelError(.unanswered(operation: operation, why: why)) }
                failure = why
            }
            if stop.isCancelled { throw ChannelError(.stopped, requestID: requestID) }
            guard attempt < configuration.maxAttempts else {
                throw ChannelError(.gaveUp(operation: operation, attempts: attempt, last: failure), requestID: requestID)
            }
            // `retry-after` is a floor; the backoff grows whatever the server says.
            let delay = max(floor, backoff)
            backoff = min(configuration.maxBackoffSeconds, backoff * 2)
            log("could not \(operation.what) (\(failure)); trying again in \(waitText(delay))")
            if !clock.sleep(seconds: delay, cancellation: stop) { throw ChannelError(.stopped, requestID: requestID) }
        }
    }

    /// The pause before attempt `n + 1` after `n` failures: the backoff of ``perform(_:)``, watching the stop.
    /// False when a stop ended it.
    public func pause(afterFailures n: Int) -> Bool {
        let delay = min(configuration.maxBackoffSeconds, configuration.backoffSeconds * Double(1 << min(n - 1, 20)))
        return clock.sleep(seconds: delay, cancellation: stop)
    }

    /// How one attempt ended, short of an answer.
    package enum Attempt {
        case answered(ChannelAnswer)
        /// The connection was lost, refused the stream, or stayed silent: worth
        /// another attempt. `maybeProcessed`: the server may have done the
        /// request (false when it cannot have: no connection, REFUSED_STREAM,
        /// a GOAWAY below the stream).
        case lost(String, maybeProcessed: Bool)
    }

    /// One attempt: connect if needed, send the request, await its answer.
    private func exchange(_ operation: ChannelOperation) throws(ChannelError) -> Attempt {
        let (connection, session): (TLSConnection, H2Session)
        let reused: Bool
        switch link {
        case .open(let c, let s): (connection, session, reused) = (c, s, true)
        case .closed:
            reused = false
            switch connect() {
            case .success(let pair): (connection, session) = pair
            case .failure(.notHTTP2):
                throw ChannelError(.unexpectedAnswer("connect", "a TLS handshake without HTTP/2 (ALPN h2)"))
            case .failure(.tls(let error)):
                if error.kind == .cancelled { throw ChannelError(.stopped) }
                if error.isCredentialOrTrustFailure { throw ChannelError(.connection(error)) }
                return .lost(Self.sentence(error), maybeProcessed: false)
            }
        }
        let headers = operation.headers(bundleID: configuration.bundleID, authority: authority, requestID: RequestID.make(),
                                        authorization: tokens.map { "bearer " + $0.current().text })
        let stream: Int32
        do { stream = try session.submitRequest(headers: headers, body: operation.body) } catch {
            dropLink()
            // A connection the server said GOAWAY on after our last answer takes no new stream: a new one, at once.
            if reused { return try exchange(operation) }
            return .lost("the HTTP/2 session refused the request: \(error)", maybeProcessed: false)
        }
        var deadline = clock.now + UInt64(configuration.answerTimeoutSeconds * 1e9)
        var stopping = false
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            do {
                var out: [UInt8] = []
                try session.send(into: &out)
                if !out.isEmpty { try connection.write(out, cancellation: nil, until: deadline, on: clock) }
                guard let n = try read(connection, into: &buffer, stop: stopping ? nil : stop, deadline: deadline) else {
                    // The request may be at the server: its answer is awaited a little longer, without the stop.
                    stopping = true
                    deadline = min(deadline, clock.now + UInt64(configuration.stopGraceSeconds * 1e9))
                    continue
                }
                if n == 0 {
                    dropLink()
                    return .lost("the gateway closed the connection", maybeProcessed: true)
                }
                try session.receive(buffer, count: n)
            } catch let error as TLSError {
                dropLink()
                if case .timedOut = error.kind {
                    if stopping { throw ChannelError(.stopped) }
                    return .lost("no answer within \(format1(configuration.answerTimeoutSeconds)) s", maybeProcessed: true)
                }
                return .lost(Self.sentence(error), maybeProcessed: true)
            } catch {
                dropLink()
                return .lost("the gateway broke the HTTP/2 protocol (\(error))", maybeProcessed: true)
            }
            for event in session.drainEvents() {
                switch event {
                case .message(let s, let fields, let body) where s == stream:
                    return .answered(ChannelAnswer(headers: fields, body: body))
                case .streamClosed(let s, let code) where s == stream && code != 0:
                    return .lost("the gateway reset the request (\(H2Session.ErrorCode.name(code)))",
                                 maybeProcessed: code != H2Session.ErrorCode.refusedStream)
                case .goAway(let last, let code):
                    // Streams above `last` were never processed; ours, at or below it, may still be answered.
                    if last < stream {
                        dropLink()
                        return .lost("the gateway is going away (GOAWAY \(H2Session.ErrorCode.name(code)))", maybeProcessed: false)
                    }
                default: continue
                }
            }
        }
    }

    /// Bytes read (0: the peer closed), or nil when `stop` rang; its waits pass on the client's clock.
    private func read(_ connection: TLSConnection, into buffer: inout [UInt8], stop: CancellationPipe?,
                      deadline: UInt64) throws(TLSError) -> Int? {
        do { return try connection.read(into: &buffer, cancellation: stop, until: deadline, on: clock) } catch {
            if error.kind == .cancelled { return nil }
            throw error
        }
    }

    private enum ConnectFailure: Error {
        case tls(TLSError)
        /// The server did not agree to ALPN h2: not APNs.
        case notHTTP2
    }

    private func connect() -> Result<(TLSConnection, H2Session), ConnectFailure> {
        do {
            let connection = try endpoint.dial(cancellation: stop)
            guard connection.negotiatedProtocol == "h2" else {
                connection.close()
                return .failure(.notHTTP2)
            }
            // No server push; a window of 1 MiB for the answers (a long list).
            let session = try H2Session(role: .client, settings: [(id: 2, value: 0), (id: 4, value: 1 << 20)])
            // A list of 10,000 channels with ids of up to 100 bytes is about 1.4 MB of JSON.
            session.maxBodyBytes = 4 << 20
            link = .open(connection, session)
            return .success((connection, session))
        } catch let error as TLSError {
            return .failure(.tls(error))
        } catch {
            return .failure(.tls(TLSError(.handshakeFailed(reason: "\(error)"))))
        }
    }

    private func dropLink() {
        if case .open(let connection, _) = link { connection.abort() }
        link = .closed
    }

    private static func sentence(_ error: TLSError) -> String {
        let text = error.description
        return text.hasSuffix(".") ? String(text.dropLast()) : text
    }
}

#if canImport(Glibc)
import Glibc
#endif
