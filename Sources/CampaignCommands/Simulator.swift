import ArgumentParser
import Foundation
import APNSWire
import CampaignTLS
import GatewaySimulator

/// `campaign simulator`: the binary gateway and feedback service on loopback.
struct Simulator: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a local APNs binary gateway and feedback service over TLS, with fault injection.",
        discussion: """
        Listens on 127.0.0.1 only. Clients must present a certificate issued by \
        the CA in --certs (as written by `campaign certs`). Stops on SIGINT or \
        SIGTERM, or after --max-seconds, and prints its totals to standard error.
        """
    )

    @Option(help: "Directory holding ca.pem, server.pem and server.key.")
    var certs: String

    @Option(help: "Gateway port (0 picks a free one).")
    var port = 0

    @Option(help: "Feedback service port (0 picks a free one).")
    var feedbackPort = 0

    @Option(help: ArgumentHelp("Write {\"port\":P,\"feedback_port\":Q} here once both ports listen.", valueName: "file"))
    var readyFile: String?

    @Option(help: ArgumentHelp("Append one NDJSON line per accepted notification.", valueName: "file"))
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

    @Option(name: .customLong("read-delay-ms"), help: ArgumentHelp("Pause this long before each read: a slow gateway.", valueName: "ms"))
    var readDelayMilliseconds = 0

    @Option(help: ArgumentHelp("NDJSON {\"ts\":UNIX,\"token\":\"hex\"} lines, served once on the feedback port.", valueName: "file"))
    var feedback: String?

    func validate() throws {
        for (name, value) in [("--port", port), ("--feedback-port", feedbackPort)] where !(0...65535).contains(value) {
            throw ValidationError("\(name) must be between 0 and 65535.")
        }
        if let n = shutdownAfter, n < 1 { throw ValidationError("--shutdown-after must be at least 1.") }
        if let n = dropEvery, n < 1 { throw ValidationError("--drop-every must be at least 1.") }
        guard (0...1).contains(errorRate) else { throw ValidationError("--error-rate must be between 0 and 1.") }
        guard readDelayMilliseconds >= 0 else { throw ValidationError("--read-delay-ms must not be negative.") }
        if let s = maxSeconds, s <= 0 { throw ValidationError("--max-seconds must be positive.") }
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
        configuration.faults.readDelayMilliseconds = readDelayMilliseconds
        if let badTokens { configuration.faults.badTokens = try FaultPlan.readTokens(path: badTokens) }
        if let feedback { configuration.feedback = try SimulatorConfiguration.readFeedback(path: feedback) }
        return configuration
    }

    func run() throws {
        let simulator = try reportingErrors(as: "simulator") {
            let simulator = try GatewaySimulator(configuration: configuration())
            try simulator.start()
            return simulator
        }
        printError("campaign simulator: gateway on 127.0.0.1:\(simulator.port), feedback on 127.0.0.1:\(simulator.feedbackPort)")
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

    init(signals: [Int32], handler: @escaping @Sendable () -> Void) {
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler(handler: handler)
            source.resume()
            sources.append(source)
        }
    }

    func cancel() {
        for source in sources { source.cancel() }
    }
}
