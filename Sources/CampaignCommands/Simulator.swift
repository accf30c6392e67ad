import ArgumentParser
import Foundation
import APNSWire
import CampaignTLS
import GatewaySimulator

/// `campaign simulator`: the binary gateway and feedback service on loopback.
struct Simulator: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a local APNs gateway over TLS, with fault injection: the binary interface and feedback service, or the HTTP/2 provider API.",
        discussion: """
        Listens on 127.0.0.1 only. Clients must present a certificate issued by \
        the CA in --certs (as written by `campaign certs`). Stops on SIGINT or \
        SIGTERM, or after --max-seconds, and prints its totals to standard error. \
        --protocol h2 serves the HTTP/2 provider API (ALPN h2) on --port and no \
        feedback service; its faults are the last options listed. With h2, --port \
        also takes broadcasts (POST /4/broadcasts/apps/BUNDLE) to Live Activity \
        channels, and --management-port serves the channel management API \
        (/1/apps/BUNDLE/channels and /all-channels) with the same authentication.
        """
    )

    @Option(name: .customLong("protocol"), help: ArgumentHelp("binary (the default: the binary interface and the feedback service) or h2 (the HTTP/2 provider API).", valueName: "name"))
    var protocolName = "binary"

    @Option(help: "Directory holding ca.pem, server.pem and server.key.")
    var certs: String

    @Option(help: "Gateway port (0 picks a free one).")
    var port = 0

    @Option(help: "Feedback service port (0 picks a free one).")
    var feedbackPort = 0

    @Option(help: ArgumentHelp("Write {\"port\":P,\"feedback_port\":Q} here once both ports listen (h2: {\"port\":P}, with \"management_port\":M when --management-port is given).", valueName: "file"))
    var readyFile: String?

    @Option(help: ArgumentHelp("Append one NDJSON line per accepted notification (h2: and per accepted broadcast, marked \"kind\":\"broadcast\").", valueName: "file"))
    var record: String?

    @Option(help: ArgumentHelp("Write the totals as JSON on exit.", valueName: "file"))
    var stats: String?

    @Option(help: "Stop after this many seconds.")
    var maxSeconds: Double?

    @Option(help: ArgumentHelp("Hex tokens, one per line, answered with status 8 (invalid token).", valueName: "file"))
    var badTokens: String?

    @Option(help: ArgumentHelp("On each connection, after N accepted, answer status 10 (shutdown) and close.", valueName: "N"))
    var shutdownAfter: Int?

    @Option(help: ArgumentHelp("On each connection, after N accepted, close hard without an error response.", valueName: "N"))
    var dropEvery: Int?

    @Option(help: ArgumentHelp("Answer this fraction of notifications with status 1 (processing error).", valueName: "R"))
    var errorRate: Double = 0

    @Option(help: "Seed for --error-rate.")
    var seed: UInt64 = 1

    @Flag(help: "HTTP/2: answer 503s with the reason \"Service Unavailable\", spaced as Apple's broadcast error list spells it.")
    var spacedReasons = false

    @Option(name: .customLong("read-delay-ms"), help: ArgumentHelp("Pause this long before each read: a slow gateway.", valueName: "ms"))
    var readDelayMilliseconds = 0

    @Option(help: ArgumentHelp("NDJSON {\"ts\":UNIX,\"token\":\"hex\"} lines, served once on the feedback port.", valueName: "file"))
    var feedback: String?

    @Option(help: ArgumentHelp("h2: a directory of <KEY ID>.pem public keys: check provider tokens (ES256 JWT) instead of requiring client certificates.", valueName: "dir"))
    var authKeys: String?

    @Option(help: ArgumentHelp("h2: refuse provider tokens issued longer ago than this (403 ExpiredProviderToken; default 3600).", valueName: "s"))
    var tokenLifetime = 3600

    @Option(help: ArgumentHelp("h2: NDJSON {\"token\":\"hex\",\"ts\":UNIX} lines, answered 410 Unregistered with that time (in milliseconds).", valueName: "file"))
    var unregistered: String?

    @Option(help: ArgumentHelp("h2: answer this fraction of requests 429 TooManyRequests (retry-after: 1).", valueName: "R"))
    var throttleRate: Double = 0

    @Option(help: ArgumentHelp("h2: on each connection, after N streams answered, GOAWAY naming the last one, then close.", valueName: "N"))
    var goawayAfter: Int?

    @Option(help: ArgumentHelp("h2: SETTINGS_MAX_CONCURRENT_STREAMS (default 1000, as Apple's).", valueName: "N"))
    var maxStreams: Int?

    @Option(help: ArgumentHelp("h2: on each connection, after N streams answered, stop reading and answering.", valueName: "N"))
    var stallAfter: Int?

    @Option(name: .customLong("latency-ms"), help: ArgumentHelp("Hold every byte received and sent this long (one way): a round trip of twice this, as from far away (0: none).", valueName: "ms"))
    var latencyMilliseconds = 0

    @Option(help: ArgumentHelp("h2: answer the first request of each of the first N connections 429 TooManyProviderTokenUpdates.", valueName: "N"))
    var tokenUpdateRefusals = 0

    @Option(help: ArgumentHelp("h2 with --auth-keys: answer a key's new token sooner than this after its previous new one 429 TooManyProviderTokenUpdates, on any connection, as APNs does (Apple: no more than once every 20 minutes, 1200).", valueName: "seconds"))
    var tokenMinInterval: Int?

    @Option(help: ArgumentHelp("h2: serve the channel management API on this port too (0 picks a free one).", valueName: "port"))
    var managementPort: Int?

    @Option(help: ArgumentHelp("h2: live channels an app may have in the environment (Apple's limit); one more create is 400 CannotCreateChannelConfig.", valueName: "N"))
    var channelLimit = Broadcast.channelLimit

    @Option(help: ArgumentHelp("h2: bytes in the channel ids it issues (Apple states no size; 16 makes 24 base64 characters).", valueName: "N"))
    var channelIdBytes = ChannelStore.defaultIDBytes

    @Option(help: ArgumentHelp("h2: the environment played, sandbox or production (Apple keeps each one's channels apart).", valueName: "name"))
    var environment = "sandbox"

    @Option(help: ArgumentHelp("h2: this bundle id's broadcast capability is off: its channel and broadcast requests are 400 FeatureNotEnabled (repeatable).", valueName: "bundle id"))
    var broadcastDisabled: [String] = []

    @Flag(help: "h2: refuse a broadcast without apns-priority (400 BadPriority) or apns-expiration (400 BadExpirationDate) instead of taking 10 and 0.")
    var broadcastStrict = false

    @Option(help: ArgumentHelp("h2: answer this fraction of valid channel management requests 429 TooManyRequests (retry-after: 1).", valueName: "R"))
    var managementThrottleRate: Double = 0

    @Option(help: ArgumentHelp("h2: answer this fraction of valid channel management requests 500 InternalServerError or 503 ServiceUnavailable (seeded by --seed).", valueName: "R"))
    var managementErrorRate: Double = 0

    @Option(help: ArgumentHelp("h2: answer the first N valid channel management requests 503 ServiceUnavailable (over all connections; nothing is created or deleted).", valueName: "N"))
    var managementUnavailableFirst = 0

    func validate() throws {
        for (name, value) in [("--port", port), ("--feedback-port", feedbackPort), ("--management-port", managementPort ?? 0)] where !(0...65535).contains(value) {
            throw ValidationError("\(name) must be between 0 and 65535.")
        }
        if let n = shutdownAfter, n < 1 { throw ValidationError("--shutdown-after must be at least 1.") }
        if let n = dropEvery, n < 1 { throw ValidationError("--drop-every must be at least 1.") }
        guard (0...1).contains(errorRate) else { throw ValidationError("--error-rate must be between 0 and 1.") }
        guard readDelayMilliseconds >= 0 else { throw ValidationError("--read-delay-ms must not be negative.") }
        guard (0...10_000).contains(latencyMilliseconds) else { throw ValidationError("--latency-ms must be between 0 and 10000.") }
        if let s = maxSeconds, s <= 0 { throw ValidationError("--max-seconds must be positive.") }
        guard ["binary", "h2"].contains(protocolName) else { throw ValidationError("--protocol must be binary or h2.") }
        guard (0...1).contains(throttleRate) else { throw ValidationError("--throttle-rate must be between 0 and 1.") }
        guard (0...1).contains(managementThrottleRate) else { throw ValidationError("--management-throttle-rate must be between 0 and 1.") }
        guard (0...1).contains(managementErrorRate) else { throw ValidationError("--management-error-rate must be between 0 and 1.") }
        guard managementUnavailableFirst >= 0 else { throw ValidationError("--management-unavailable-first must not be negative.") }
        guard channelLimit >= 0 else { throw ValidationError("--channel-limit must not be negative.") }
        if let t = tokenMinInterval, t < 0 { throw ValidationError("--token-min-interval must not be negative.") }
        if tokenMinInterval != nil, authKeys == nil { throw ValidationError("--token-min-interval goes with --auth-keys DIR.") }
        guard (1...ChannelID.maxBytes).contains(channelIdBytes) else {
            throw ValidationError("--channel-id-bytes must be between 1 and \(ChannelID.maxBytes).")
        }
        guard ["sandbox", "production"].contains(environment) else { throw ValidationError("--environment must be sandbox or production.") }
        for (name, value) in [("--goaway-after", goawayAfter), ("--max-streams", maxStreams), ("--stall-after", stallAfter)] {
            if let value, value < 1 { throw ValidationError("\(name) must be at least 1.") }
        }
        if protocolName != "h2" {
            let h2Only = [("--unregistered", unregistered != nil), ("--throttle-rate", throttleRate > 0), ("--goaway-after", goawayAfter != nil),
                          ("--max-streams", maxStreams != nil), ("--stall-after", stallAfter != nil), ("--auth-keys", authKeys != nil),
                          ("--token-update-refusals", tokenUpdateRefusals > 0), ("--token-min-interval", tokenMinInterval != nil), ("--management-port", managementPort != nil),
                          ("--channel-limit", channelLimit != Broadcast.channelLimit), ("--channel-id-bytes", channelIdBytes != ChannelStore.defaultIDBytes), ("--environment", environment != "sandbox"),
                          ("--broadcast-disabled", !broadcastDisabled.isEmpty), ("--management-throttle-rate", managementThrottleRate > 0),
                          ("--management-error-rate", managementErrorRate > 0), ("--broadcast-strict", broadcastStrict),
                          ("--management-unavailable-first", managementUnavailableFirst > 0)].filter(\.1).map(\.0)
            if !h2Only.isEmpty { throw ValidationError("\(h2Only.joined(separator: ", ")) go with --protocol h2.") }
        } else {
            if shutdownAfter != nil { throw ValidationError("--shutdown-after is a binary-interface fault; with --protocol h2 use --goaway-after.") }
            if feedback != nil { throw ValidationError("--feedback is the binary feedback service; with --protocol h2 use --unregistered (410 answers).") }
        }
    }

    func configuration() throws -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration(certificatesDirectory: certs)
        configuration.port = port
        configuration.feedbackPort = feedbackPort
        configuration.readyPath = readyFile
        configuration.recordPath = record
        configuration.statisticsPath = stats
        configuration.faults.shutdownAfter = shutdownAfter
        configuration.faults.dropEvery = dropEvery
        configuration.faults.errorRate = errorRate
        configuration.faults.seed = seed
        configuration.faults.spacedReasons = spacedReasons
        configuration.faults.readDelayMilliseconds = readDelayMilliseconds
        configuration.latencyMilliseconds = latencyMilliseconds
        if let badTokens { configuration.faults.badTokens = try FaultPlan.readTokens(path: badTokens) }
        if let feedback { configuration.feedback = try SimulatorConfiguration.readFeedback(path: feedback) }
        configuration.http2 = protocolName == "h2"
        if let unregistered { configuration.faults.unregistered = try SimulatorConfiguration.readUnregistered(path: unregistered) }
        configuration.faults.throttleRate = throttleRate
        configuration.faults.goAwayAfter = goawayAfter
        configuration.faults.maxStreams = maxStreams
        configuration.faults.stallAfter = stallAfter
        configuration.faults.tokenUpdateRefusals = tokenUpdateRefusals
        configuration.tokenMinimumIntervalSeconds = tokenMinInterval
        configuration.authKeysDirectory = authKeys
        configuration.tokenLifetimeSeconds = tokenLifetime
        configuration.managementPort = managementPort
        configuration.channelLimit = channelLimit
        configuration.channelIDBytes = channelIdBytes
        configuration.environment = environment
        configuration.broadcastDisabled = Set(broadcastDisabled)
        configuration.broadcastStrict = broadcastStrict
        configuration.managementUnavailableFirst = managementUnavailableFirst
        configuration.managementFaults.throttleRate = managementThrottleRate
        configuration.managementFaults.errorRate = managementErrorRate
        configuration.managementFaults.seed = seed
        return configuration
    }

    func run() throws {
        let simulator = try reportingErrors(as: "simulator") {
            let simulator = try GatewaySimulator(configuration: configuration())
            try simulator.start()
            return simulator
        }
        if simulator.configuration.http2 {
            printError("campaign simulator: HTTP/2 provider API on 127.0.0.1:\(simulator.port)"
                       + (simulator.managementPort > 0 ? ", channel management API on 127.0.0.1:\(simulator.managementPort)" : ""))
        } else {
            printError("campaign simulator: gateway on 127.0.0.1:\(simulator.port), feedback on 127.0.0.1:\(simulator.feedbackPort)")
        }
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { simulator.requestStop() }
        simulator.waitUntilCancelled(seconds: maxSeconds)
        simulator.stop()
        signals.cancel()
        printError(simulator.currentStatistics().summary)
    }
}

/// Turns SIGINT/SIGTERM into a callback on a dispatch queue, instead of the
/// default of dying mid-write.
final class SignalWatcher: @unchecked Sendable {
    private var sources: [DispatchSourceSignal] = []

    /// Returns once every source is registered (at most a few seconds):
    /// a source starts listening on its queue after `resume()` returns, and
    /// a signal in between, already ignored, was lost (a send signalled
    /// soon after it started went on for ever).
    init(signals: [Int32], handler: @escaping @Sendable () -> Void) {
        let registered = DispatchSemaphore(value: 0)
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler(handler: handler)
            source.setRegistrationHandler { registered.signal() }
            source.resume()
            sources.append(source)
        }
        for _ in signals { _ = registered.wait(timeout: .now() + 5) }
    }

    func cancel() {
        for source in sources { source.cancel() }
    }
}
