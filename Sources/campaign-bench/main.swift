// campaign-bench: measurements behind `make bench`. Not part of `make test`.
//
//   campaign-bench simulator [--notifications N] [--connections C] [--record] [--format enhanced|frame|simple]
//
// Starts the simulator in-process on 127.0.0.1, writes N pre-encoded
// notifications over C TLS connections with a minimal writer (no
// bookkeeping), and reports how fast the simulator accepted them.

import Foundation
import APNSWire
import CampaignIO
import CampaignTLS
import GatewaySimulator

struct Options {
    var notifications = 2_000_000
    var connections = 1
    var record = false
    var format = NotificationFormat.enhanced
    var runs = 3

    init(_ args: ArraySlice<String>) {
        parseOptions(args) { name, value in
            switch name {
            case "--notifications": notifications = Int(value())!
            case "--connections": connections = Int(value())!
            case "--record": record = true
            case "--format": format = NotificationFormat(name: value())!
            case "--runs": runs = Int(value())!
            default: fatalError("unknown option \(name)")
            }
        }
    }
}

/// Walks `--name [value]` options; `value()` takes the next argument.
func parseOptions(_ args: ArraySlice<String>, _ handle: (String, () -> String) -> Void) {
    var i = args.startIndex
    while i < args.endIndex {
        let name = args[i]
        handle(name) {
            i += 1
            guard i < args.endIndex else { fatalError("missing value for \(name)") }
            return args[i]
        }
        i += 1
    }
}

/// N notifications of realistic size: 32-byte tokens, ~110-byte payloads with some non-ASCII.
func encodedNotifications(_ count: Int, format: NotificationFormat, offset: Int) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(count * 160)
    var token = [UInt8](repeating: 0, count: 32)
    for i in 0..<count {
        let id = UInt32(offset + i + 1)
        withUnsafeBytes(of: id.bigEndian) { for (j, b) in $0.enumerated() { token[j] = b } }
        let payload = Array(#"{"aps":{"alert":"Hola Ana, 20% de descuento hasta el domingo ¡no te lo pierdas! #\#(id)","sound":"default","badge":3}}"#.utf8)
        Notification(format: format, token: token, payload: payload, identifier: id, expiry: 0,
                     priority: format == .frame ? .immediate : nil).encode(into: &out)
    }
    return out
}

func runSimulatorBenchmark(_ options: Options) throws {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("campaign-bench-\(getpid())").path
    defer { try? FileManager.default.removeItem(atPath: dir) }
    try DevelopmentCertificates.write(to: dir + "/certs", bundleID: "com.example.bench")
    let identity = try TLSIdentity.pem(certificate: dir + "/certs/client.pem", key: dir + "/certs/client.key", passphrase: nil)
    let context = try TLSContext.client(identity: identity, trust: .file(dir + "/certs/ca.pem"))
    let perConnection = options.notifications / options.connections
    let payloads = (0..<options.connections).map { encodedNotifications(perConnection, format: options.format, offset: $0 * perConnection) }
    let total = perConnection * options.connections
    var rates: [Double] = []
    for run in 1...options.runs {
        var configuration = SimulatorConfiguration(certificatesDirectory: dir + "/certs")
        if options.record { configuration.recordPath = dir + "/record-\(run).ndjson" }
        let simulator = try GatewaySimulator(configuration: configuration)
        try simulator.start()
        let connections = try (0..<options.connections).map { _ in
            try TLSConnection.connect(host: "127.0.0.1", port: simulator.port, context: context)
        }
        let start = Deadline.now()
        let group = DispatchGroup()
        for (connection, bytes) in zip(connections, payloads) {
            DispatchQueue.global().async(group: group) {
                // 16 KB writes: one TLS record each, as a batching sender would write.
                bytes.withUnsafeBytes { raw in
                    var offset = 0
                    while offset < raw.count {
                        let end = min(raw.count, offset + 16_384)
                        try! connection.write(UnsafeRawBufferPointer(rebasing: raw[offset..<end]))
                        offset = end
                    }
                }
            }
        }
        group.wait()
        guard simulator.waitForStatistics(timeout: 600, { $0.accepted == total }) else {
            fatalError("simulator accepted \(simulator.currentStatistics().accepted) of \(total)")
        }
        let seconds = Double(Deadline.now().nanoseconds - start.nanoseconds) / 1e9
        for connection in connections { connection.close() }
        simulator.stop()
        let rate = Double(total) / seconds
        rates.append(rate)
        print(String(format: "run %d: %d notifications over %d connection(s) in %.3f s = %.0f/s", run, total, options.connections, seconds, rate))
    }
    let median = rates.sorted()[rates.count / 2]
    print(String(format: "median: %.0f notifications/s (format %@, record %@)", median, options.format.description, options.record ? "on" : "off"))
}

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "simulator":
    try runSimulatorBenchmark(Options(arguments.dropFirst()))
case "audience":
    try writeAudience(AudienceOptions(arguments.dropFirst()))
case "csv-tokenize":
    try tokenizeCSV(path: arguments.dropFirst().first ?? "-")
case "writer":
    try runWriter(Array(arguments.dropFirst()))
case "h2-sessions":
    try runH2Sessions(Array(arguments.dropFirst()))
case "ledger":
    try writeLedger(arguments.dropFirst())
case "results-journal":
    try writeResultsJournal(Array(arguments.dropFirst()))
default:
    print("""
    usage: campaign-bench simulator [--notifications N] [--connections C] [--record] [--format F] [--runs R]
           campaign-bench results-journal PLAN DIR
           campaign-bench audience [--rows N] [--format csv|ndjson] [--seed S] [--bad-every K] [--time-zones]
           campaign-bench csv-tokenize FILE
           campaign-bench writer --port P --certs DIR [--plan FILE | --notifications N]
           campaign-bench h2-sessions [--requests N] [--streams S]
           campaign-bench ledger [--devices N] [--campaigns K] [--seed S] [--out DIR] [--scope NAME] [--touch]
    """)
    exit(64)
}
