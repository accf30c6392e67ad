// swift-tools-version:6.0
import PackageDescription

// Plan's row loop and send's reading and connection threads keep their state
// in classes whose properties are checked for exclusive access at run time;
// in release builds that check cost about a tenth of planning time, and each
// such object is used by one thread by design. Only the modules on those
// paths drop the check; the library products (APNSWire, GatewaySimulator)
// and every target under them keep it: SwiftPM refuses unsafe flags in a
// tagged dependency (scripts/check_products.py, run by `make test`).
let hotPath: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "campaign",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "campaign", targets: ["campaign"]),
        .library(name: "APNSWire", targets: ["APNSWire"]),
        .library(name: "GatewaySimulator", targets: ["GatewaySimulator"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        // Layers, bottom up; a target depends only on targets above it in this list.

        // C libraries from Debian, each behind a system-library target, and
        // thin shims for what Swift cannot import (macros, hidden calls).
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // HTTP/2 framing, HPACK and flow control (nghttp2 1.52): sessions that
        // take and give bytes, so each sits on our own TLS connection thread.
        .systemLibrary(
            name: "CNGHTTP2",
            pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]
        ),
        // libcsv-dev ships no pkg-config file; the module map links "csv".
        .systemLibrary(
            name: "CCSV",
            providers: [.apt(["libcsv-dev"])]
        ),
        // OpenSSL's function-like macros as functions.
        .target(name: "COpenSSLShims", dependencies: ["COpenSSL"]),
        // zlib's macros, sync_file_range, __builtin_prefetch, CRC-32 with PCLMULQDQ, libFuzzer's driver.
        .target(name: "CIOShims", dependencies: ["CZlib"]),

        // Wire and JSON: pure Swift, no I/O, no Foundation; products others may depend on.
        .target(name: "APNSWire"),
        .target(name: "CampaignJSON"),

        // The unsafe layer. CampaignIO: the system: files' modes, locks,
        // threads, wake-up pipes, deadlines, CPU times, one I/O error; the
        // simulator and TLS need no more, so it keeps run-time exclusivity
        // checks. ByteStreams: the bytes of the row loop (files and stdin,
        // gzip, CRC-32, the libcsv tokenizer, lines, buffered writes).
        .target(name: "CampaignIO", dependencies: ["CIOShims"]),
        .target(name: "ByteStreams", dependencies: ["CampaignIO", "CZlib", "CCSV", "CIOShims"], swiftSettings: hotPath),

        // Campaign rules as pure functions: which variant a device is in.
        .target(name: "CampaignRules"),

        // Time zones from the system's tz database, and when a scheduled campaign reaches each device.
        .target(name: "LocalTime", dependencies: ["ByteStreams", "CampaignIO"]),
        // The send ledger: which campaigns reached which devices, when (segments of 16-byte entries); the frequency cap rule.
        .target(name: "SendLedger", dependencies: ["ByteStreams", "CampaignIO", "CIOShims"], swiftSettings: hotPath),

        // Audience rows, job files and payloads, the suppression store, the plan stream.
        .target(name: "AudienceIngest", dependencies: ["APNSWire", "ByteStreams", "CampaignIO", "CampaignJSON"], swiftSettings: hotPath),
        .target(name: "CampaignPayload", dependencies: ["APNSWire", "CampaignRules", "AudienceIngest", "ByteStreams", "CampaignIO", "CampaignJSON", "LocalTime", "SendLedger"], swiftSettings: hotPath),
        .target(name: "FeedbackStore", dependencies: ["APNSWire", "ByteStreams", "CampaignIO", "CampaignJSON"]),
        // The plan stream: header, records, trailer; its writer and verifying reader.
        .target(name: "PlanStream", dependencies: ["APNSWire", "CampaignRules", "ByteStreams", "CampaignIO", "CampaignJSON", "LocalTime", "SendLedger"], swiftSettings: hotPath),

        // The planner: de-duplication and the reading, preparing and planning stages.
        .target(name: "CampaignPlan", dependencies: ["APNSWire", "CampaignRules", "AudienceIngest", "ByteStreams", "CampaignIO", "CampaignJSON", "CampaignPayload",
                                                     "FeedbackStore", "PlanStream", "CIOShims", "LocalTime", "SendLedger"], swiftSettings: hotPath),

        // Transport: sockets, TLS over OpenSSL (client and server), identities, development certificates.
        .target(name: "CampaignTLS", dependencies: ["CampaignIO", "COpenSSL", "COpenSSLShims"]),
        // HTTP/2 sessions over bytes (nghttp2), client and server.
        .target(name: "CampaignHTTP2", dependencies: ["CNGHTTP2"]),
        // What every client of the gateway shares: the clock, provider tokens, the HTTP/2 answer's table, backoffs, the feedback client.
        .target(name: "GatewayClient", dependencies: ["APNSWire", "ByteStreams", "CampaignIO", "CampaignJSON", "CampaignTLS", "FeedbackStore", "LocalTime"]),
        // The channel management API's client (broadcast channels: create, list, show, delete) and the channel-id files.
        .target(name: "ChannelManagement", dependencies: ["APNSWire", "CampaignHTTP2", "ByteStreams", "CampaignIO", "CampaignJSON", "CampaignTLS", "GatewayClient"]),
        // A send's journal: its settings, each run's records (outcomes, failures, skips, ticks) and the state read back from them;
        // `campaign cancel` on journals, and a send's watch of its cancel file.
        .target(name: "SendJournal", dependencies: ["APNSWire", "ByteStreams", "CampaignIO", "CampaignJSON", "CampaignTLS", "GatewayClient", "LocalTime", "PlanStream"], swiftSettings: hotPath),
        // The engine a send runs on, whatever its protocol: the connection engine and pool, the queues, pacing, the unproven
        // window, the outcome sinks and the counts they keep, the release rule at the wire; no wire protocol.
        .target(name: "SendEngine", dependencies: ["APNSWire", "ByteStreams", "CampaignIO", "CampaignJSON", "PlanStream", "CampaignTLS",
                                                   "FeedbackStore", "GatewayClient", "LocalTime", "SendJournal", "SendLedger"], swiftSettings: hotPath),
        // The two wire protocols over the engine: the HTTP/2 provider API (one connection's state, its answers and losses,
        // device and channel targets) and the binary provider interface (commands 0, 1 and 2).
        .target(name: "H2Provider", dependencies: ["APNSWire", "CampaignHTTP2", "CampaignIO", "CampaignJSON", "CampaignTLS", "GatewayClient",
                                                   "PlanStream", "SendEngine", "SendJournal"], swiftSettings: hotPath),
        .target(name: "BinaryProvider", dependencies: ["APNSWire", "CampaignIO", "CampaignTLS", "GatewayClient", "PlanStream", "SendEngine", "SendJournal"], swiftSettings: hotPath),
        // The sender: sessions, the record stages, the schedule's gate, the ticker and metrics; picks a plan's protocol.
        .target(name: "CampaignSend", dependencies: ["APNSWire", "BinaryProvider", "ByteStreams", "CampaignIO", "CampaignJSON", "PlanStream", "CampaignTLS",
                                                     "FeedbackStore", "GatewayClient", "H2Provider", "LocalTime", "SendEngine", "SendJournal", "SendLedger"], swiftSettings: hotPath),

        // A send's results: who was in which group, the app's events, the statistics (pure) against the holdout.
        .target(name: "CampaignResults", dependencies: ["APNSWire", "AudienceIngest", "ByteStreams", "CampaignIO", "CampaignJSON", "CampaignPlan", "PlanStream", "CampaignSend", "SendEngine", "SendJournal",
                                                        "LocalTime"], swiftSettings: hotPath),

        // The gateway and feedback simulator, startable in-process on port 0.
        .target(name: "GatewaySimulator", dependencies: ["APNSWire", "CampaignIO", "CampaignJSON", "CampaignTLS", "CampaignHTTP2"]),

        // The CLI: subcommands; the executable only calls Campaign.main().
        .target(
            name: "CampaignCommands",
            dependencies: [
                "APNSWire", "AudienceIngest", "ByteStreams", "CampaignHTTP2", "CampaignIO", "CampaignJSON", "CampaignPayload", "CampaignPlan", "PlanStream",
                "CampaignTLS", "CampaignSend", "SendEngine", "SendJournal", "GatewayClient", "ChannelManagement", "CampaignResults", "FeedbackStore", "GatewaySimulator", "LocalTime", "SendLedger",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(name: "campaign", dependencies: ["CampaignCommands"]),
        // Measurements for `make bench`; release builds only.
        .executableTarget(name: "campaign-bench", dependencies: ["APNSWire", "ByteStreams", "CampaignIO", "SendLedger", "CampaignPlan", "PlanStream", "CampaignSend", "BinaryProvider", "SendEngine", "SendJournal", "CampaignTLS", "GatewaySimulator", "CampaignHTTP2"]),
        // The parsers of untrusted input as fuzz targets, and `campaign-fuzz`,
        // which replays inputs through them (or, built by `make fuzz`, runs libFuzzer).
        .target(name: "CampaignFuzzTargets", dependencies: ["APNSWire", "AudienceIngest", "ByteStreams", "CampaignIO", "CampaignJSON", "CampaignPayload", "CampaignPlan", "PlanStream"]),
        .executableTarget(name: "campaign-fuzz", dependencies: ["CampaignFuzzTargets", "CIOShims"]),

        .target(name: "CampaignTestSupport", dependencies: ["CampaignTLS", "CampaignIO", "CampaignHTTP2", "GatewayClient", "GatewaySimulator", "PlanStream", "SendJournal"], path: "Tests/CampaignTestSupport"),
        .testTarget(name: "APNSWireTests", dependencies: ["APNSWire", "CampaignIO"]),
        .testTarget(name: "CampaignIOTests", dependencies: ["CampaignIO", "CampaignTestSupport"]),
        .testTarget(name: "ByteStreamsTests", dependencies: ["ByteStreams", "CampaignIO", "CampaignTestSupport"]),
        .testTarget(name: "CampaignJSONTests", dependencies: ["CampaignJSON"]),
        .testTarget(name: "SendLedgerTests", dependencies: ["SendLedger", "ByteStreams", "CampaignIO", "CampaignTestSupport"]),
        .testTarget(name: "LocalTimeTests", dependencies: ["LocalTime", "CampaignTestSupport"]),
        .testTarget(name: "CampaignFuzzTargetsTests", dependencies: ["CampaignFuzzTargets"], exclude: []),
        .testTarget(name: "GatewayClientTests", dependencies: ["GatewayClient", "APNSWire", "CampaignIO", "CampaignTLS", "CampaignTestSupport"]),
        .testTarget(name: "ChannelManagementTests", dependencies: ["ChannelManagement", "GatewayClient", "APNSWire", "CampaignHTTP2", "CampaignIO", "CampaignTLS", "CampaignTestSupport"]),
        .testTarget(name: "SendJournalTests", dependencies: ["SendJournal", "CampaignJSON", "CampaignTestSupport"]),
        .testTarget(name: "SendEngineTests", dependencies: ["SendEngine", "APNSWire", "GatewayClient", "PlanStream", "SendJournal", "CampaignTestSupport"]),
        .testTarget(name: "BinaryProviderTests", dependencies: ["BinaryProvider"]),
        .testTarget(name: "H2ProviderTests", dependencies: ["H2Provider"]),
        .testTarget(name: "CampaignSendTests", dependencies: ["CampaignSend", "BinaryProvider", "H2Provider", "SendEngine", "SendJournal", "GatewayClient", "CampaignHTTP2", "CampaignPlan", "PlanStream", "CampaignPayload", "AudienceIngest", "GatewaySimulator", "CampaignTLS", "ByteStreams", "CampaignIO", "CampaignJSON", "APNSWire", "FeedbackStore", "LocalTime", "CampaignTestSupport"]),
        .testTarget(name: "CampaignPlanTests", dependencies: ["CampaignPlan", "SendLedger", "PlanStream", "AudienceIngest", "CampaignPayload", "ByteStreams", "CampaignIO", "FeedbackStore", "APNSWire", "CampaignJSON", "CampaignRules", "CampaignTestSupport", "LocalTime"]),
        .testTarget(name: "CampaignPayloadTests", dependencies: ["CampaignPayload", "AudienceIngest", "APNSWire", "CampaignJSON", "ByteStreams", "CampaignIO", "CampaignRules", "CampaignTestSupport"]),
        .testTarget(name: "AudienceIngestTests", dependencies: ["AudienceIngest", "ByteStreams", "CampaignIO", "CampaignTestSupport"]),
        .testTarget(name: "CampaignTLSTests", dependencies: ["CampaignTLS", "CampaignIO", "CampaignTestSupport"]),
        .testTarget(name: "CampaignResultsTests", dependencies: ["CampaignResults", "CampaignIO", "CampaignJSON", "CampaignTestSupport"]),
        .testTarget(name: "CampaignHTTP2Tests", dependencies: ["CampaignHTTP2", "CampaignTestSupport"]),
        .testTarget(
            name: "GatewaySimulatorTests",
            dependencies: ["GatewaySimulator", "APNSWire", "CampaignTLS", "CampaignTestSupport", "CampaignIO", "CampaignJSON"]
        ),
        .testTarget(
            name: "CampaignCommandsTests",
            dependencies: ["CampaignCommands", "CampaignTestSupport", "CampaignTLS", "ByteStreams", "CampaignIO", "CampaignJSON", "CampaignPlan", "PlanStream",
                           "CampaignPayload", "CampaignSend", "SendEngine", "SendJournal", "GatewayClient", "ChannelManagement", "CampaignResults", "AudienceIngest", "APNSWire", "GatewaySimulator", "FeedbackStore", "LocalTime", "SendLedger"]
        ),
    ]
)
