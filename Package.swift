// swift-tools-version:6.0
import PackageDescription

// The hot paths (plan's row loop, the codecs) keep their state in classes whose
// properties are checked for exclusive access at run time; in release builds
// that check cost about a tenth of planning time, and the code is
// single-threaded per object by design.
let releaseSpeed: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

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
        // C libraries from Debian, each behind a system-library target.
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
        // libcsv-dev ships no pkg-config file; the module map links "csv".
        .systemLibrary(
            name: "CCSV",
            providers: [.apt(["libcsv-dev"])]
        ),
        // One-line wrappers for C macros that Swift cannot import.
        .target(name: "CCampaignShims", dependencies: ["COpenSSL", "CZlib"]),

        // Pure wire codec: no I/O, no Foundation.
        .target(name: "APNSWire", swiftSettings: releaseSpeed),
        // Exact JSON values (key order, number text) and byte-level JSON text building.
        .target(name: "CampaignJSON", swiftSettings: releaseSpeed),
        // Files and stdin, gzip, CRC-32 and the libcsv tokenizer: the unsafe layer under ingest, plans and journals.
        .target(name: "CampaignIO", dependencies: ["CZlib", "CCSV", "CCampaignShims"], swiftSettings: releaseSpeed),
        // Audience files: CSV (libcsv) and NDJSON rows, with line numbers.
        .target(name: "AudienceIngest", dependencies: ["APNSWire", "CampaignIO", "CampaignJSON"], swiftSettings: releaseSpeed),
        // Job files, language matching, templates, payload rendering and fitting.
        .target(name: "CampaignPayload", dependencies: ["APNSWire", "AudienceIngest", "CampaignIO", "CampaignJSON"], swiftSettings: releaseSpeed),
        // The suppression store: devices the feedback service or status 8 reported.
        .target(name: "FeedbackStore", dependencies: ["APNSWire", "CampaignIO", "CampaignJSON"]),
        // The plan stream, de-duplication, and the planner that turns an audience into a plan.
        .target(name: "CampaignPlan", dependencies: ["APNSWire", "AudienceIngest", "CampaignIO", "CampaignJSON", "CampaignPayload", "FeedbackStore", "CCampaignShims"], swiftSettings: releaseSpeed),
        // The sender: connections, batching, error recovery, the journal.
        .target(name: "CampaignSend", dependencies: ["APNSWire", "CampaignIO", "CampaignJSON", "CampaignPlan", "CampaignTLS", "FeedbackStore"], swiftSettings: releaseSpeed),
        // Sockets, TLS over OpenSSL, development certificates, gzip and CSV wrappers.
        .target(name: "CampaignTLS", dependencies: ["CampaignIO", "COpenSSL", "CCampaignShims"]),
        // The gateway and feedback simulator, startable in-process on port 0.
        .target(name: "GatewaySimulator", dependencies: ["APNSWire", "CampaignIO", "CampaignJSON", "CampaignTLS"], swiftSettings: releaseSpeed),
        // Subcommands; the executable only calls Campaign.main().
        .target(
            name: "CampaignCommands",
            dependencies: [
                "APNSWire", "AudienceIngest", "CampaignIO", "CampaignPayload", "CampaignPlan", "CampaignTLS",
                "CampaignSend", "FeedbackStore", "GatewaySimulator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(name: "campaign", dependencies: ["CampaignCommands"]),
        // Measurements for `make bench`; release builds only.
        .executableTarget(name: "campaign-bench", dependencies: ["APNSWire", "CampaignIO", "CampaignPlan", "CampaignSend", "CampaignTLS", "GatewaySimulator"]),
        // The parsers of untrusted input as fuzz targets, and `campaign-fuzz`,
        // which replays inputs through them (or, built by `make fuzz`, runs libFuzzer).
        .target(name: "CampaignFuzzTargets", dependencies: ["APNSWire", "AudienceIngest", "CampaignIO", "CampaignJSON", "CampaignPayload", "CampaignPlan"]),
        .executableTarget(name: "campaign-fuzz", dependencies: ["CampaignFuzzTargets", "CCampaignShims"]),

        .target(name: "CampaignTestSupport", dependencies: ["CampaignTLS"], path: "Tests/CampaignTestSupport"),
        .testTarget(name: "APNSWireTests", dependencies: ["APNSWire", "CampaignIO"]),
        .testTarget(name: "CampaignIOTests", dependencies: ["CampaignIO", "CampaignTestSupport"]),
        .testTarget(name: "CampaignJSONTests", dependencies: ["CampaignJSON"]),
        .testTarget(name: "CampaignFuzzTargetsTests", dependencies: ["CampaignFuzzTargets"], exclude: []),
        .testTarget(name: "CampaignSendTests", dependencies: ["CampaignSend", "CampaignPlan", "CampaignPayload", "AudienceIngest", "GatewaySimulator", "CampaignTLS", "CampaignIO", "CampaignJSON", "APNSWire", "FeedbackStore", "CampaignTestSupport"]),
        .testTarget(name: "CampaignPlanTests", dependencies: ["CampaignPlan", "AudienceIngest", "CampaignPayload", "CampaignIO", "FeedbackStore", "APNSWire", "CampaignJSON", "CampaignTestSupport"]),
        .testTarget(name: "CampaignPayloadTests", dependencies: ["CampaignPayload", "AudienceIngest", "APNSWire", "CampaignJSON", "CampaignTestSupport"]),
        .testTarget(name: "AudienceIngestTests", dependencies: ["AudienceIngest", "CampaignIO", "CampaignTestSupport"]),
        .testTarget(name: "CampaignTLSTests", dependencies: ["CampaignTLS", "CampaignTestSupport"]),
        .testTarget(
            name: "GatewaySimulatorTests",
            dependencies: ["GatewaySimulator", "APNSWire", "CampaignTLS", "CampaignTestSupport"]
        ),
        .testTarget(
            name: "CampaignCommandsTests",
            dependencies: ["CampaignCommands", "CampaignTestSupport", "CampaignTLS", "CampaignIO", "CampaignJSON", "CampaignPlan",
                           "CampaignPayload", "CampaignSend", "AudienceIngest", "APNSWire", "GatewaySimulator"]
        ),
    ]
)
