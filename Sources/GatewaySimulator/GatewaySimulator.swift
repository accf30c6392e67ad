import Foundation
import APNSWire
import CampaignIO
import CampaignTLS

/// Apple's binary gateway and feedback service, on loopback over TLS, with
/// fault injection: so sending can be tested for real on one machine.
///
/// It validates as strictly as the guides say the gateway does. On a refused
/// notification it writes the error-response packet (none for command 0),
/// closes the connection, and discards everything that followed on that
/// connection, even bytes it had already received. Each connection runs on its
/// own thread; ``stop()`` wakes them all through one cancellation pipe.
public final class GatewaySimulator: @unchecked Sendable {
    public let configuration: SimulatorConfiguration
    /// The gateway port, known once started.
    public private(set) var port = 0
    /// The feedback port, known once started.
    public private(set) var feedbackPort = 0
    /// HTTP/2: the channel management port, known once started; 0 when there is none.
    public private(set) var managementPort = 0
    /// The broadcast channels, shared by both HTTP/2 listeners.
    public let channelStore: ChannelStore

    private let cancellation: CancellationPipe
    private let context: TLSContext
    private let record: NotificationRecordFile?
    private let lock = Lock()
    /// Broadcast whenever the statistics or the thread count change.
    private let changed = Condition()
    private var statistics = SimulatorStatistics()
    private var pendingFeedback: [FeedbackTuple]
    private var nextConnection = 1
    private var threads = 0
    private var stopped = false
    private var gatewayListener: Listener?
    /// With --latency-ms: the relays in front of the gateway and the management listener.
    private var relayListeners: [Listener] = []
    /// HTTP/2 token authentication: public keys by key id.
    private let authKeys: [String: PublicKey]
    /// `--token-min-interval`: a key's new tokens, over every connection.
    public let tokenRegistry: ProviderTokenRegistry?

    static func loadAuthKeys(_ directory: String) throws -> [String: PublicKey] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var keys: [String: PublicKey] = [:]
        for name in names where name.hasSuffix(".pem") {
            keys[String(name.dropLast(4))] = try PublicKey.load(pemFile: "\(directory)/\(name)")
        }
        guard !keys.isEmpty else {
            throw SimulatorInputError(path: directory, line: nil, reason: "holds no <KEY ID>.pem public keys for --auth-keys")
        }
        return keys
    }
    private var feedbackListener: Listener?
    private var managementListener: Listener?
    /// Management connections are numbered apart, so the device connections'
    /// numbers (and the faults keyed to them) do not depend on them.
    private var nextManagementConnection = 1
    private let channels: ChannelService

    /// Loads the certificates and opens the record file; does not listen yet.
    public init(configuration: SimulatorConfiguration) throws {
        self.configuration = configuration
        let dir = configuration.certificatesDirectory
        let identity = try TLSIdentity.pem(
            certificate: "\(dir)/\(DevelopmentCertificates.serverCertificate)",
            key: "\(dir)/\(DevelopmentCertificates.serverKey)", passphrase: nil)
        context = try TLSContext.server(identity: identity, clientAuthorities: "\(dir)/\(DevelopmentCertificates.caCertificate)",
                                        http2: configuration.http2, requireClientCertificate: configuration.authKeysDirectory == nil)
        authKeys = try configuration.authKeysDirectory.map(Self.loadAuthKeys) ?? [:]
        tokenRegistry = configuration.tokenMinimumIntervalSeconds.map { ProviderTokenRegistry(minimumInterval: Int64($0)) }
        cancellation = try CancellationPipe()
        record = try configuration.recordPath.map { try NotificationRecordFile(path: $0) }
        pendingFeedback = configuration.feedback
        channelStore = ChannelStore(limit: configuration.channelLimit, idBytes: configuration.channelIDBytes)
        channels = ChannelService(store: channelStore, environment: configuration.environment,
                                  apps: BroadcastApps(disabled: configuration.broadcastDisabled, strict: configuration.broadcastStrict),
                                  outage: Outage(requests: configuration.managementUnavailableFirst))
    }

    /// Listens on both ports, writes the ready file, and serves until ``stop()``.
    /// With HTTP/2 there is no feedback service (410 answers replace it): one port.
    public func start() throws {
        let gateway: Listener
        (gateway, port) = try listen(on: configuration.port)
        gatewayListener = gateway
        if configuration.http2 {
            spawn { self.acceptLoop(gateway) { self.serveHTTP2($0) } }
            if let requested = configuration.managementPort {
                let management: Listener
                (management, managementPort) = try listen(on: requested)
                managementListener = management
                spawn { self.acceptLoop(management) { self.serveManagement($0) } }
            }
        } else {
            let feedback = try Listener(host: configuration.host, port: configuration.feedbackPort)
            feedbackListener = feedback
            feedbackPort = feedback.port
            spawn { self.acceptLoop(gateway) { self.serveGateway($0) } }
            spawn { self.acceptLoop(feedback) { self.serveFeedback($0) } }
        }
        if let ready = configuration.readyPath {
            let text = (!configuration.http2 ? #"{"port":\#(port),"feedback_port":\#(feedbackPort)}"#
                        : managementListener == nil ? #"{"port":\#(port)}"# : #"{"port":\#(port),"management_port":\#(managementPort)}"#) + "\n"
            try SecureFile.write(Array(text.utf8), to: ready, mode: SecureFile.publicMode)
        }
    }

    /// A listener for a service on `requested`, and the port clients use.
    /// With --latency-ms the service listens on a port of its own, behind a
    /// relay on `requested` that delays every byte.
    private func listen(on requested: Int) throws -> (Listener, Int) {
        guard configuration.latencyMilliseconds > 0 else {
            let listener = try Listener(host: configuration.host, port: requested)
            return (listener, listener.port)
        }
        let behind = try Listener(host: configuration.host, port: 0)
        let front = try Listener(host: configuration.host, port: requested)
        relayListeners.append(front)
        let relay = LatencyRelay(delayNanoseconds: UInt64(configuration.latencyMilliseconds) * 1_000_000)
        let (host, behindPort) = (configuration.host, behind.port)
        spawn { self.acceptLoop(front) { client in
            guard let server = try? Socket.connect(host: host, port: behindPort, deadline: .after(seconds: 5), cancellation: self.cancellation) else { return }
            relay.run(client: client, server: server, cancellation: self.cancellation)
        } }
        return (behind, front.port)
    }

    /// Asks the simulator to stop; returns at once. Safe from any thread.
    public func requestStop() {
        cancellation.cancel()
    }

    /// Stops listening, ends every connection, waits for their threads, and
    /// writes the statistics file. Safe to call more than once.
    public func stop() {
        cancellation.cancel()
        lock.lock()
        while threads > 0 { changed.wait(lock) }
        let first = !stopped
        stopped = true
        let snapshot = withChannelCounts(statistics)
        lock.unlock()
        gatewayListener?.close()
        managementListener?.close()
        for relay in relayListeners { relay.close() }
        feedbackListener?.close()
        if first, let path = configuration.statisticsPath {
            if path == "-" {
                let bytes = Array(snapshot.json()) + [0x0A]
                var offset = 0
                while offset < bytes.count,
                      let n = try? syscall("write", { bytes.withUnsafeBytes { Glibc.write(1, $0.baseAddress! + offset, $0.count - offset) } }) {
                    offset += n
                }
            } else {
                try? SecureFile.write(Array(snapshot.json()), to: path, mode: SecureFile.publicMode)
            }
        }
    }

    /// Blocks until ``stop()`` is called from elsewhere, or `seconds` pass.
    /// Returns false on timeout.
    @discardableResult
    public func waitUntilCancelled(seconds: Double?) -> Bool {
        sleep(until: seconds.map { Deadline.after(seconds: $0) } ?? .distantFuture, cancellation: cancellation) == false
    }

    /// A copy of the totals so far.
    public func currentStatistics() -> SimulatorStatistics {
        lock.lock()
        defer { lock.unlock() }
        return withChannelCounts(statistics)
    }

    private func withChannelCounts(_ statistics: SimulatorStatistics) -> SimulatorStatistics {
        var statistics = statistics
        (statistics.channelsCreated, statistics.channelsDeleted) = channelStore.counts()
        statistics.providerTokens = tokenRegistry?.tokensTaken
        return statistics
    }

    /// Waits until `condition` holds for the statistics (checked each time they
    /// change), or the timeout passes. Returns whether it holds.
    public func waitForStatistics(timeout: Double = 30, _ condition: (SimulatorStatistics) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        lock.lock()
        defer { lock.unlock() }
        while !condition(statistics) {
            if !changed.wait(lock, seconds: max(0, deadline.timeIntervalSinceNow)) { return condition(statistics) }
        }
        return true
    }

    // MARK: - Threads

    private func spawn(_ body: @escaping @Sendable () -> Void) {
        lock.lock()
        threads += 1
        lock.unlock()
        startDetachedThread(stackSize: 1 << 20) { [self] in
            body()
            lock.lock()
            threads -= 1
            changed.broadcast()
            lock.unlock()
        }
    }

    private func acceptLoop(_ listener: Listener, serve: @escaping @Sendable (Socket) -> Void) {
        while let socket = try? listener.accept(cancellation: cancellation) {
            spawn { serve(socket) }
        }
    }

    private func update(_ body: (inout SimulatorStatistics) -> Void) {
        lock.lock()
        body(&statistics)
        changed.broadcast()
        lock.unlock()
    }

    // MARK: - Gateway

    /// The TLS handshake on an accepted socket, and the connection's number
    /// and statistics; nil (counted) when the handshake fails.
    private func acceptConnection(_ socket: Socket) -> (TLSConnection, Int)? {
        let connection: TLSConnection
        do {
            connection = try TLSConnection.accept(socket: socket, context: context, cancellation: cancellation)
        } catch {
            update { $0.handshakeFailures += 1 }
            return nil
        }
        lock.lock()
        let index = nextConnection
        nextConnection += 1
        statistics.connections.append(ConnectionStatistics(connection: index))
        // A waiter for this connection (waitForStatistics) must hear of it now,
        // not at its timeout.
        changed.broadcast()
        lock.unlock()
        return (connection, index)
    }

    private func serveGateway(_ socket: Socket) {
        guard let (connection, index) = acceptConnection(socket) else { return }
        var session = GatewaySession(
            index: index, faults: configuration.faults, limits: configuration.limits,
            recording: record != nil)
        let ending = session.run(connection: connection, cancellation: cancellation) { [self] progress in
            record?.write(progress.recordLines)
            update { stats in
                guard let i = stats.connections.firstIndex(where: { $0.connection == index }) else { return }
                stats.connections[i].accepted += progress.accepted
                stats.connections[i].discarded += progress.discarded
                if let status = progress.rejected { stats.connections[i].rejected[status.rawValue, default: 0] += 1 }
                if let ending = progress.ending { stats.connections[i].ending = ending }
            }
        }
        finish(connection, ending: ending)
    }

    /// Ends a connection as the gateway would.
    private func finish(_ connection: TLSConnection, ending: GatewaySession.Ending) {
        switch ending {
        case .peerClosed, .cancelled:
            connection.close()
        case .dropped:
            connection.abort()
        case .refused, .wentAway:
            // Stop writing, then read and discard until the client closes (at most
            // 2 s), so the last words (an error response, a GOAWAY's answers) are
            // not lost to a TCP reset triggered by unread input.
            connection.finishWriting()
            var sink = [UInt8](repeating: 0, count: 16_384)
            let deadline = Deadline.after(seconds: 2)
            sink.withUnsafeMutableBytes { raw in
                while let n = try? connection.read(into: raw, cancellation: cancellation, deadline: deadline), n > 0 {}
            }
            connection.socket.close()
        }
    }

    // MARK: - HTTP/2

    private func serveHTTP2(_ socket: Socket) {
        guard let (connection, index) = acceptConnection(socket) else { return }
        var session = h2Session(connection, index: index, port: .device, faults: configuration.faults)
        let ending = session.run(connection: connection, cancellation: cancellation) { [self] progress in
            record?.write(progress.recordLines)
            update { stats in
                guard let i = stats.connections.firstIndex(where: { $0.connection == index }) else { return }
                stats.connections[i].accepted += progress.accepted
                stats.connections[i].answers.merge(progress.answers, uniquingKeysWith: +)
                stats.connections[i].broadcasts += progress.broadcasts
                stats.connections[i].broadcastAnswers.merge(progress.broadcastAnswers, uniquingKeysWith: +)
                stats.connections[i].answersNeverWritten += progress.neverWritten
                if let ending = progress.ending { stats.connections[i].ending = ending }
            }
        }
        finish(connection, ending: ending)
    }

    /// A session for an accepted HTTP/2 connection. The certificate's topic
    /// is its UID, as in an APNs provider certificate. With keys, tokens
    /// authenticate (a certificate is optional).
    private func h2Session(_ connection: TLSConnection, index: Int, port: H2GatewaySession.Port, faults: FaultPlan) -> H2GatewaySession {
        let topic = connection.peerSubject.flatMap { subject in
            subject.split(separator: ",").lazy.map { $0.trimmingWhitespace() }.first { $0.hasPrefix("UID=") }.map { String($0.dropFirst(4)) }
        }
        let tokens = authKeys.isEmpty ? nil : ProviderTokenCheck(keys: authKeys, lifetimeSeconds: Int64(configuration.tokenLifetimeSeconds),
                                                                 registry: tokenRegistry)
        return H2GatewaySession(index: index, port: port, faults: faults, recording: record != nil, channels: channels,
                                certificateTopic: tokens == nil ? (topic ?? "") : nil, tokens: tokens)
    }

    /// The channel management listener: the same TLS, authentication and
    /// session as the device listener, other routes, its own faults, and
    /// totals of its own (its answers are not device pushes).
    private func serveManagement(_ socket: Socket) {
        let connection: TLSConnection
        do {
            connection = try TLSConnection.accept(socket: socket, context: context, cancellation: cancellation)
        } catch {
            update { $0.handshakeFailures += 1 }
            return
        }
        lock.lock()
        let index = nextManagementConnection
        nextManagementConnection += 1
        statistics.managementConnections += 1
        changed.broadcast()
        lock.unlock()
        var session = h2Session(connection, index: index, port: .management, faults: configuration.managementFaults)
        let ending = session.run(connection: connection, cancellation: cancellation) { [self] progress in
            update { $0.managementAnswers.merge(progress.answers, uniquingKeysWith: +) }
        }
        finish(connection, ending: ending)
    }

    // MARK: - Feedback

    private func serveFeedback(_ socket: Socket) {
        guard let connection = try? TLSConnection.accept(socket: socket, context: context, cancellation: cancellation) else {
            update { $0.handshakeFailures += 1 }
            return
        }
        // Like Apple's service, the list is cleared once handed to a connection,
        // whether or not the client reads it all: a client must not lose what it read.
        lock.lock()
        let tuples = pendingFeedback
        pendingFeedback = []
        statistics.feedbackServed += tuples.count
        changed.broadcast()
        lock.unlock()
        var bytes: [UInt8] = []
        for tuple in tuples { tuple.encode(into: &bytes) }
        try? connection.write(bytes, cancellation: cancellation, deadline: .after(seconds: 30))
        connection.close()
    }
}
