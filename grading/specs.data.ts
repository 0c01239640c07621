// Data extracted from the official SWE-bench harness, tag v4.1.0 (726c5461), swebench/harness/constants/*.py
// (MAP_REPO_VERSION_TO_SPECS): only the fields the eval script uses (test_cmd; install for python;
// eval_commands; build for the others). Versions with identical fields are grouped. When the harness
// changes, re-extract from its constants rather than editing by hand, and bump GRADER_VERSION.
import type { SpecTable } from "./spec-types.js";

export const SPEC_TABLE: SpecTable = {
  "redis/redis": {
    ext: "c",
    groups: [
      {
        versions: ["13115"],
        testCmd: ["TERM=dumb ./runtest --durable --single unit/scripting"],
        build: ["make distclean", "make"],
      },
      {
        versions: ["12472"],
        testCmd: ['TERM=dumb ./runtest --durable --single unit/acl --only "/.*ACL GETUSER.*"'],
        build: ["make distclean", "make"],
      },
      {
        versions: ["12272"],
        testCmd: [
          'TERM=dumb ./runtest --durable --single unit/type/string --only "/.*(GETRANGE|SETRANGE).*"',
        ],
        build: ["make distclean", "make"],
      },
      {
        versions: ["11734"],
        testCmd: ["TERM=dumb ./runtest --durable --single unit/bitops"],
        build: ["make distclean", "make"],
      },
      {
        versions: ["10764"],
        testCmd: ['TERM=dumb ./runtest --durable --single unit/type/zset --only "BZMPOP"'],
        build: ["make distclean", "make"],
      },
      {
        versions: ["10095"],
        testCmd: ['TERM=dumb ./runtest --durable --single unit/type/list --only "/.*(LPOP|RPOP)"'],
        build: ["make distclean", "make"],
      },
      {
        versions: ["9733"],
        testCmd: ["TERM=dumb ./runtest --durable --single unit/introspection-2"],
        build: ["make distclean", "make"],
      },
      {
        versions: ["10068"],
        testCmd: ['TERM=dumb ./runtest --durable --single unit/type/stream --only "/*XTRIM*"'],
        build: ["make distclean", "make"],
      },
      {
        versions: ["11631"],
        testCmd: ['TERM=dumb ./runtest --durable --single unit/geo --only "/.*GEOSEARCH .*"'],
        build: ["make distclean", "make"],
      },
      {
        versions: ["11510"],
        testCmd: ['TERM=dumb ./runtest --durable --single unit/introspection --only "/.*MONITOR.*"'],
        build: ["make distclean", "make"],
      },
      {
        versions: ["11279"],
        testCmd: ["TERM=dumb ./runtest --durable --single unit/acl"],
        build: ["make distclean", "make"],
      },
      {
        versions: ["13338"],
        testCmd: ["TERM=dumb ./runtest --durable --single unit/type/stream-cgroups"],
        build: ["make distclean", "make"],
      },
    ],
  },
  "jqlang/jq": {
    ext: "c",
    groups: [
      {
        versions: ["2839", "2650", "2235", "2658", "2750", "2681", "2919", "2598", "2728"],
        testCmd: ["make check"],
        build: [
          "git submodule update --init",
          "autoreconf -fi",
          "./configure --with-oniguruma=builtin",
          "make clean",
          "touch src/parser.y src/lexer.l",
          "make -j$(nproc)",
        ],
      },
    ],
  },
  "nlohmann/json": {
    ext: "c",
    groups: [
      {
        versions: ["4237"],
        testCmd: ["./build/tests/test-udt_cpp11 -s -r=xml"],
        build: ["mkdir -p build", "cd build", "cmake ..", "make test-udt_cpp11", "cd .."],
      },
    ],
  },
  "micropython/micropython": {
    ext: "c",
    groups: [
      {
        versions: ["15898"],
        testCmd: [
          "cd tests",
          "MICROPY_CPYTHON3=python3 MICROPY_MICROPYTHON=../ports/unix/build-standard/micropython ./run-tests.py -i string_format",
        ],
        build: [
          "source ./tools/ci.sh",
          "ci_unix_build_helper VARIANT=standard",
          "gcc -shared -o tests/ports/unix/ffi_lib.so tests/ports/unix/ffi_lib.c",
        ],
      },
      {
        versions: ["13569"],
        testCmd: [
          "cd tests",
          "MICROPY_CPYTHON3=python3 MICROPY_MICROPYTHON=../ports/unix/build-standard/micropython ./run-tests.py -i try",
        ],
        build: [
          "source ./tools/ci.sh",
          "ci_unix_build_helper VARIANT=standard",
          "gcc -shared -o tests/ports/unix/ffi_lib.so tests/ports/unix/ffi_lib.c",
        ],
      },
      {
        versions: ["13039"],
        testCmd: [
          "cd tests",
          "MICROPY_CPYTHON3=python3 MICROPY_MICROPYTHON=../ports/unix/build-standard/micropython ./run-tests.py -i slice",
        ],
        build: [
          "source ./tools/ci.sh",
          "ci_unix_build_helper VARIANT=standard",
          "gcc -shared -o tests/unix/ffi_lib.so tests/unix/ffi_lib.c",
        ],
      },
      {
        versions: ["12158"],
        testCmd: [
          "cd tests",
          "MICROPY_CPYTHON3=python3 MICROPY_MICROPYTHON=../ports/unix/build-standard/micropython ./run-tests.py -d thread",
        ],
        build: [
          "source ./tools/ci.sh",
          "ci_unix_build_helper VARIANT=standard",
          "gcc -shared -o tests/unix/ffi_lib.so tests/unix/ffi_lib.c",
        ],
      },
      {
        versions: ["10095"],
        testCmd: [
          "cd tests",
          "MICROPY_CPYTHON3=python3 MICROPY_MICROPYTHON=../ports/unix/build-standard/micropython ./run-tests.py -i basics/fun",
        ],
        build: ["source ./tools/ci.sh", "ci_unix_build_helper VARIANT=standard"],
      },
    ],
  },
  "valkey-io/valkey": {
    ext: "c",
    groups: [
      {
        versions: ["928"],
        testCmd: [
          'TERM=dumb ./runtest --durable --single unit/cluster/replica-migration --only "/.*NOREPLICAS.*"',
        ],
        build: ["make distclean", "make"],
      },
      {
        versions: ["790"],
        testCmd: ["TERM=dumb ./runtest --durable --single unit/cluster/cluster-shards"],
        build: ["make distclean", "make"],
      },
      {
        versions: ["1499"],
        testCmd: ["TERM=dumb ./runtest --durable --single unit/introspection-2"],
        build: ["make distclean", "make"],
      },
      {
        versions: ["1842"],
        testCmd: ['TERM=dumb ./runtest --durable --single unit/acl --only "/.*ACL LOAD.*"'],
        build: ["make distclean", "make"],
      },
    ],
  },
  "fmtlib/fmt": {
    ext: "c",
    groups: [
      {
        versions: ["3863", "3158", "2457"],
        testCmd: ["ctest --test-dir build -V -R ranges-test"],
        build: [
          "mkdir -p build",
          "cmake -B build -S .",
          "cmake --build build --parallel $(nproc) --target ranges-test",
        ],
      },
      {
        versions: ["3901", "3750", "3248", "2317", "2310"],
        testCmd: ["ctest --test-dir build -V -R format-test"],
        build: [
          "mkdir -p build",
          "cmake -B build -S .",
          "cmake --build build --parallel $(nproc) --target format-test",
        ],
      },
      {
        versions: ["3272"],
        testCmd: ["ctest --test-dir build -V -R xchar-test"],
        build: [
          "mkdir -p build",
          "cmake -B build -S .",
          "cmake --build build --parallel $(nproc) --target xchar-test",
        ],
      },
      {
        versions: ["3729"],
        testCmd: ["ctest --test-dir build -V -R std-test"],
        build: [
          "mkdir -p build",
          "cmake -B build -S .",
          "cmake --build build --parallel $(nproc) --target std-test",
        ],
      },
      {
        versions: ["1683"],
        testCmd: ["ctest --test-dir build -V -R printf-test"],
        build: [
          "mkdir -p build",
          "cmake -B build -S .",
          "cmake --build build --parallel $(nproc) --target printf-test",
        ],
      },
    ],
  },
  "caddyserver/caddy": {
    ext: "go",
    groups: [
      { versions: ["6411"], testCmd: ['go test -v . -run "TestReplacerNew*"'] },
      { versions: ["6345"], testCmd: ["go test -v ./caddytest/integration"] },
      { versions: ["6115"], testCmd: ["go test -v ./modules/caddyhttp/reverseproxy"] },
      { versions: ["6051", "5404"], testCmd: ["go test -v ./caddyconfig/caddyfile"] },
      { versions: ["6370"], testCmd: ["go test -v ./cmd"] },
      {
        versions: ["6350", "6288", "4774"],
        testCmd: ['go test -v ./caddytest/integration -run "TestCaddyfileAdapt*"'],
      },
      { versions: ["5995"], testCmd: ['go test -v ./caddytest/integration -run "^TestUriReplace"'] },
      { versions: ["4943"], testCmd: ["go test -v ./modules/logging"] },
      { versions: ["5626"], testCmd: ['go test -v ./caddyconfig/httpcaddyfile -run "Test.*Import"'] },
      { versions: ["5761"], testCmd: ['go test -v ./caddyconfig/caddyfile -run "TestLexer.*"'] },
      { versions: ["5870"], testCmd: ['go test -v . -run "TestUnsyncedConfigAccess"'] },
    ],
  },
  "hashicorp/terraform": {
    ext: "go",
    groups: [
      {
        versions: ["35611"],
        testCmd: ['go test -v ./internal/terraform -run "^TestContext2Apply_provisioner"'],
      },
      { versions: ["35543"], testCmd: ['go test -v ./internal/terraform -run "^TestContext2Plan_import"'] },
      {
        versions: ["34900"],
        testCmd: [
          'go test -v ./internal/terraform -run "(^TestContext2Apply|^TestContext2Plan).*[Ss]ensitive"',
        ],
      },
      { versions: ["34580"], testCmd: ['go test -v ./internal/command -run "^TestFmt"'] },
      { versions: ["34814"], testCmd: ["go test -v ./internal/builtin/provisioners/remote-exec"] },
    ],
  },
  "prometheus/prometheus": {
    ext: "go",
    groups: [
      { versions: ["14861"], testCmd: ['go test -v ./promql -run "^TestEngine"'] },
      {
        versions: ["13845"],
        testCmd: ['go test -v ./promql ./model/labels -run "^(TestRangeQuery|TestLabels)"'],
      },
      { versions: ["12874", "15142"], testCmd: ['go test -v ./tsdb -run "^TestHead"'] },
      { versions: ["11859"], testCmd: ['go test -v ./tsdb -run "^TestSnapshot"'] },
      { versions: ["10720", "9248"], testCmd: ['go test -v ./promql -run "^TestEvaluations"'] },
      {
        versions: ["10633"],
        testCmd: ['go test -v ./discovery/puppetdb -run "TestPuppetDBRefreshWithParameters"'],
      },
    ],
  },
  "gohugoio/hugo": {
    ext: "go",
    groups: [
      { versions: ["12768"], testCmd: ["go test -v ./markup/goldmark/blockquotes/..."] },
      { versions: ["12579"], testCmd: ['go test -v ./resources/page -run "^TestGroupBy"'] },
      { versions: ["12562"], testCmd: ['go test -v ./hugolib/... -run "^TestGetPage[^/]"'] },
      { versions: ["12448"], testCmd: ['go test -v ./hugolib/... -run "^TestRebuild"'] },
      { versions: ["12343"], testCmd: ['go test -v ./resources/page/... -run "^Test.*Permalink"'] },
      { versions: ["12204"], testCmd: ['go test -v ./tpl/tplimpl -run "^TestEmbedded"'] },
      { versions: ["12171"], testCmd: ['go test -v ./hugolib -run "^Test.*Pages"'] },
    ],
  },
  "gin-gonic/gin": {
    ext: "go",
    groups: [
      { versions: ["4003"], testCmd: ['go test . -v -run "TestMethodNotAllowedNoRoute"'] },
      { versions: ["3820"], testCmd: ['go test -v ./binding -run "^TestMapping"'] },
      { versions: ["3741"], testCmd: ['go test -v . -run "^TestColor"'] },
      { versions: ["2755"], testCmd: ['go test -v . -run "^TestTree"'] },
      { versions: ["3227"], testCmd: ['go test -v . -run "^TestRedirect"'] },
      { versions: ["2121"], testCmd: ['go test -v ./... -run "^Test.*Reader"'] },
      { versions: ["1957"], testCmd: ['go test -v . -run "^TestContext.*Bind"'] },
      { versions: ["1805"], testCmd: ['go test -v . -run "^Test.*Router"'] },
    ],
  },
  "google/gson": {
    ext: "java",
    groups: [
      {
        versions: ["2158"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testByteSerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testShortSerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testIntSerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testLongSerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testFloatSerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testDoubleSerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testPrimitiveIntegerAutoboxedSerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testPrimitiveIntegerAutoboxedInASingleElementArraySerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testReallyLongValuesSerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testPrimitiveLongAutoboxedSerialization",
        ],
      },
      {
        versions: ["2024"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.FieldNamingTest#testUpperCaseWithUnderscores",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.NamingPolicyTest#testGsonWithUpperCaseUnderscorePolicySerialization",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.NamingPolicyTest#testGsonWithUpperCaseUnderscorePolicyDeserialiation",
        ],
      },
      {
        versions: ["2479"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.GsonBuilderTest#testRegisterTypeAdapterForObjectAndJsonElements",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.GsonBuilderTest#testRegisterTypeHierarchyAdapterJsonElements",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.GsonBuilderTest#testModificationAfterCreate",
        ],
      },
      {
        versions: ["2134"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.internal.bind.util.ISO8601UtilsTest#testDateParseInvalidDay",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.internal.bind.util.ISO8601UtilsTest#testDateParseInvalidMonth",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.internal.bind.util.ISO8601UtilsTest#testDateParseWithDefaultTimezone",
        ],
      },
      {
        versions: ["2061"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.stream.JsonReaderTest#testHasNextEndOfDocument",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.internal.bind.JsonTreeReaderTest#testHasNext_endOfDocument",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.stream.JsonReaderTest#testReadEmptyObject",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.stream.JsonReaderTest#testReadEmptyArray",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.internal.bind.JsonTreeReaderTest#testSkipValue_emptyJsonObject",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.internal.bind.JsonTreeReaderTest#testSkipValue_filledJsonObject",
        ],
      },
      {
        versions: ["2311"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.JsonPrimitiveTest#testEqualsIntegerAndBigInteger",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.JsonPrimitiveTest#testLongEqualsBigInteger",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.JsonPrimitiveTest#testEqualsAcrossTypes",
        ],
      },
      {
        versions: ["1100"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.DefaultDateTypeAdapterTest#testNullValue",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.DefaultDateTypeAdapterTest#testDatePattern",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.DefaultDateTypeAdapterTest#testInvalidDatePattern",
        ],
      },
      {
        versions: ["1093"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.stream.JsonWriterTest#testNonFiniteDoublesWhenLenient",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.stream.JsonWriterTest#testNonFiniteBoxedDoublesWhenLenient",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.stream.JsonWriterTest#testNonFiniteDoubles",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.stream.JsonWriterTest#testNonFiniteBoxedDoubles",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.stream.JsonWriterTest#testDoubles",
        ],
      },
      {
        versions: ["1014"],
        testCmd: [
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.internal.bind.JsonTreeReaderTest#testSkipValue_emptyJsonObject",
          "mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.internal.bind.JsonTreeReaderTest#testSkipValue_filledJsonObject",
        ],
      },
    ],
  },
  "apache/druid": {
    ext: "java",
    groups: [
      {
        versions: ["15402"],
        testCmd: [
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.query.groupby.GroupByQueryQueryToolChestTest#testCacheStrategy",
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.query.groupby.GroupByQueryQueryToolChestTest#testResultLevelCacheKeyWithSubTotalsSpec",
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.query.groupby.GroupByQueryQueryToolChestTest#testMultiColumnCacheStrategy",
        ],
      },
      {
        versions: ["14092"],
        testCmd: [
          "mvnd test -B -T 1C -pl server -Dtest=org.apache.druid.discovery.DruidLeaderClientTest#test503ResponseFromServerAndCacheRefresh",
          "mvnd test -B -T 1C -pl server -Dtest=org.apache.druid.discovery.DruidLeaderClientTest#testServerFailureAndRedirect",
        ],
      },
      {
        versions: ["14136"],
        testCmd: [
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.timeline.VersionedIntervalTimelineTest#testOverlapSecondContainsFirstZeroLengthInterval",
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.timeline.VersionedIntervalTimelineTest#testOverlapSecondContainsFirstZeroLengthInterval2",
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.timeline.VersionedIntervalTimelineTest#testOverlapSecondContainsFirstZeroLengthInterval3",
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.timeline.VersionedIntervalTimelineTest#testOverlapSecondContainsFirstZeroLengthInterval4",
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.timeline.VersionedIntervalTimelineTest#testOverlapFirstContainsSecond",
          "mvnd test -B -T 1C -pl processing -Dtest=org.apache.druid.timeline.VersionedIntervalTimelineTest#testOverlapSecondContainsFirst",
        ],
      },
      {
        versions: ["13704"],
        testCmd: [
          "mvnd test -B -pl processing -Dtest=org.apache.druid.query.aggregation.post.ArithmeticPostAggregatorTest#testPow",
          "mvnd test -B -pl processing -Dtest=org.apache.druid.query.aggregation.post.ArithmeticPostAggregatorTest#testDiv",
          "mvnd test -B -pl processing -Dtest=org.apache.druid.query.aggregation.post.ArithmeticPostAggregatorTest#testQuotient",
        ],
      },
      {
        versions: ["16875"],
        testCmd: [
          "mvnd test -B -pl server -Dtest=org.apache.druid.server.metrics.WorkerTaskCountStatsMonitorTest#testMonitorWithPeon",
          "mvnd test -B -pl server -Dtest=org.apache.druid.server.metrics.WorkerTaskCountStatsMonitorTest#testMonitorWithNulls",
          "mvnd test -B -pl server -Dtest=org.apache.druid.server.metrics.WorkerTaskCountStatsMonitorTest#testMonitorIndexer",
        ],
      },
    ],
  },
  "javaparser/javaparser": {
    ext: "java",
    groups: [
      {
        versions: ["4561"],
        testCmd: [
          "./mvnw test -B -pl javaparser-symbol-solver-testing -Dtest=Issue4560Test",
          "./mvnw test -B -pl javaparser-symbol-solver-testing -Dtest=JavaSymbolSolverTest",
        ],
        build: ["./mvnw clean install -B -pl javaparser-symbol-solver-testing -DskipTests -am"],
      },
      {
        versions: ["4538"],
        testCmd: [
          "./mvnw test -B -pl javaparser-core-testing -Dtest=NodeTest",
          "./mvnw test -B -pl javaparser-core-testing -Dtest=NodePositionTest",
        ],
        build: ["./mvnw clean install -B -pl javaparser-core-testing -DskipTests -am"],
      },
    ],
  },
  "projectlombok/lombok": {
    ext: "java",
    groups: [
      {
        versions: [
          "3602",
          "3312",
          "3697",
          "3326",
          "3674",
          "3594",
          "3422",
          "3215",
          "3486",
          "3042",
          "3052",
          "2792",
          "3571",
          "3479",
          "3371",
          "3350",
          "3009",
        ],
        testCmd: ["ant test.instance"],
        build: ["ant test.compile"],
      },
    ],
  },
  "apache/lucene": {
    ext: "java",
    groups: [
      {
        versions: ["13494"],
        testCmd: ["./gradlew test --tests org.apache.lucene.facet.TestStringValueFacetCounts"],
      },
      {
        versions: ["13704"],
        testCmd: ["./gradlew test --tests org.apache.lucene.search.TestLatLonDocValuesQueries"],
      },
      {
        versions: ["13301"],
        testCmd: [
          "./gradlew test --tests TestXYPoint.testEqualsAndHashCode -Dtests.seed=3ABEFE4D876DD310 -Dtests.nightly=true -Dtests.locale=es-419 -Dtests.timezone=Asia/Ulaanbaatar -Dtests.asserts=true -Dtests.file.encoding=UTF-8",
        ],
      },
      { versions: ["12626"], testCmd: ["./gradlew test --tests org.apache.lucene.index.TestIndexWriter"] },
      { versions: ["12212"], testCmd: ["./gradlew test --tests org.apache.lucene.facet.TestDrillSideways"] },
      {
        versions: ["13170"],
        testCmd: [
          "./gradlew test --tests org.apache.lucene.analysis.opennlp.TestOpenNLPSentenceBreakIterator",
        ],
      },
      {
        versions: ["12196"],
        testCmd: ["./gradlew test --tests org.apache.lucene.queryparser.classic.TestMultiFieldQueryParser"],
      },
      { versions: ["12022"], testCmd: ["./gradlew test --tests org.apache.lucene.document.TestLatLonShape"] },
      {
        versions: ["11760"],
        testCmd: ["./gradlew test --tests org.apache.lucene.queries.intervals.TestIntervalBuilder"],
      },
    ],
  },
  "reactivex/rxjava": {
    ext: "java",
    groups: [
      {
        versions: ["7597"],
        testCmd: [
          "./gradlew test --tests io.reactivex.rxjava3.internal.operators.observable.ObservableSwitchTest",
        ],
      },
    ],
  },
  "Automattic/wp-calypso": {
    ext: "js",
    groups: [
      {
        versions: [
          "0.8",
          "4.2.3",
          "4.3.0",
          "5.10.1",
          "5.11.1",
          "6.1.0",
          "6.7.0",
          "6.9.0",
          "6.9.1",
          "6.9.4",
          "6.10.0",
          "6.10.2",
          "6.10.3",
          "6.11.1",
          "6.11.2",
          "6.11.5",
          "8.9.1",
          "8.9.3",
          "8.9.4",
          "8.11.0",
          "8.11.2",
          "10.4.1",
          "10.5.0",
          "10.6.0",
          "10.9.0",
          "10.10.0",
          "10.12.0",
          "10.13.0",
          "10.14.0",
          "10.15.2",
          "10.16.3",
        ],
        testCmd: "npm run test-client",
      },
    ],
  },
  "chartjs/Chart.js": {
    ext: "js",
    groups: [
      {
        versions: ["4.0", "4.1", "4.2", "4.3", "4.4"],
        testCmd: [
          "pnpm install",
          "pnpm run build",
          'xvfb-run --server-args="-screen 0 1280x1024x24 -ac :99" su chromeuser -c "./node_modules/.bin/cross-env NODE_ENV=test ./node_modules/.bin/karma start ./karma.conf.cjs --single-run --coverage --grep --auto-watch false"',
        ],
      },
      {
        versions: ["3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8"],
        testCmd: [
          "npm install",
          "npm run build",
          'xvfb-run --server-args="-screen 0 1280x1024x24 -ac :99" su chromeuser -c "./node_modules/.bin/cross-env NODE_ENV=test ./node_modules/.bin/karma start ./karma.conf.js --single-run --coverage --grep --auto-watch false"',
        ],
      },
      {
        versions: ["2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9"],
        testCmd: [
          "npm install",
          "gulp build",
          'xvfb-run --server-args="-screen 0 1280x1024x24 -ac :99" su chromeuser -c "gulp test"',
        ],
      },
    ],
  },
  "markedjs/marked": {
    ext: "js",
    groups: [
      {
        versions: ["0.3", "0.5", "0.6", "0.7", "1.0", "1.1", "1.2", "2.0", "3.9", "4.0", "4.1", "5.0"],
        testCmd: "./node_modules/.bin/jasmine --no-color --config=jasmine.json",
      },
    ],
  },
  "processing/p5.js": {
    ext: "js",
    groups: [
      {
        versions: [
          "0.10",
          "0.2",
          "0.7",
          "0.8",
          "0.9",
          "1.0",
          "1.1",
          "1.2",
          "1.3",
          "1.4",
          "1.5",
          "1.6",
          "1.7",
          "1.8",
          "1.9",
          "0.4",
          "0.5",
          "0.6",
        ],
        testCmd:
          "sed -i 's/concurrency:[[:space:]]*[0-9][0-9]*/concurrency: 1/g' Gruntfile.js\nstdbuf -o 1M ./node_modules/.bin/grunt test --quiet --force",
      },
    ],
  },
  "diegomura/react-pdf": {
    ext: "js",
    groups: [
      { versions: ["1.0", "1.1", "1.2"], testCmd: "./node_modules/.bin/jest --no-color" },
      {
        versions: ["2.0"],
        testCmd: 'NODE_OPTIONS="--experimental-vm-modules" ./node_modules/.bin/jest --no-color',
      },
    ],
  },
  "babel/babel": {
    ext: "js",
    groups: [
      { versions: ["14532"], testCmd: ["yarn jest babel-generator --verbose"], build: ["make build"] },
      {
        versions: ["13928"],
        testCmd: ['yarn jest babel-parser -t "arrow" --verbose'],
        build: ["make build"],
      },
      {
        versions: ["15649"],
        testCmd: ["yarn jest packages/babel-traverse/test/scope.js --verbose"],
        build: ["make build"],
      },
      {
        versions: ["15445"],
        testCmd: ['yarn jest packages/babel-generator/test/index.js -t "generation " --verbose'],
        build: ["make build"],
      },
      { versions: ["16130"], testCmd: ["yarn jest babel-helpers --verbose"], build: ["make build"] },
    ],
  },
  "vuejs/core": {
    ext: "js",
    groups: [
      {
        versions: ["11899"],
        testCmd: [
          "pnpm run test packages/compiler-sfc/__tests__/compileStyle.spec.ts --no-watch --reporter=verbose",
        ],
        build: ["pnpm run build compiler-sfc"],
      },
      {
        versions: ["11870"],
        testCmd: [
          "pnpm run test packages/runtime-core/__tests__/helpers/renderList.spec.ts --no-watch --reporter=verbose",
        ],
      },
      {
        versions: ["11739"],
        testCmd: [
          'pnpm run test packages/runtime-core/__tests__/hydration.spec.ts --no-watch --reporter=verbose -t "mismatch handling"',
        ],
      },
      {
        versions: ["11915"],
        testCmd: [
          'pnpm run test packages/compiler-core/__tests__/parse.spec.ts --no-watch --reporter=verbose -t "Element"',
        ],
      },
      {
        versions: ["11589"],
        testCmd: [
          "pnpm run test packages/runtime-core/__tests__/apiWatch.spec.ts --no-watch --reporter=verbose",
        ],
      },
    ],
  },
  "facebook/docusaurus": {
    ext: "js",
    groups: [
      {
        versions: ["10309"],
        testCmd: [
          "yarn test packages/docusaurus-plugin-content-docs/src/client/__tests__/docsClientUtils.test.ts --verbose",
        ],
      },
      {
        versions: ["10130"],
        testCmd: ["yarn test packages/docusaurus/src/server/__tests__/brokenLinks.test.ts --verbose"],
      },
      {
        versions: ["9897"],
        testCmd: ["yarn test packages/docusaurus-utils/src/__tests__/markdownUtils.test.ts --verbose"],
      },
      {
        versions: ["9183"],
        testCmd: ["yarn test packages/docusaurus-theme-classic/src/__tests__/options.test.ts --verbose"],
      },
      {
        versions: ["8927"],
        testCmd: ["yarn test packages/docusaurus-utils/src/__tests__/markdownLinks.test.ts --verbose"],
      },
    ],
  },
  "immutable-js/immutable-js": {
    ext: "js",
    groups: [
      { versions: ["2006"], testCmd: ["npx jest __tests__/Range.ts --verbose"], build: ["npm run build"] },
      {
        versions: ["2005"],
        testCmd: [
          'npx jest __tests__/OrderedMap.ts __tests__/OrderedSet.ts --silent --json | jq -r \'.testResults[].assertionResults[] | "[" + (.status | ascii_upcase) + "] " + ((.ancestorTitles | join(" > ")) + (if .ancestorTitles | length > 0 then " > " else "" end) + .title)\'',
        ],
        build: ["npm run build"],
      },
    ],
  },
  "mrdoob/three.js": {
    ext: "js",
    groups: [
      { versions: ["27395"], testCmd: ["npx qunit test/unit/src/math/Sphere.tests.js"] },
      {
        versions: ["26589"],
        testCmd: [
          "npx qunit test/unit/src/objects/Line.tests.js test/unit/src/objects/Mesh.tests.js test/unit/src/objects/Points.tests.js",
        ],
      },
      {
        versions: ["25687"],
        testCmd: ['npx qunit test/unit/src/core/Object3D.tests.js -f "/json|clone|copy/i"'],
      },
    ],
  },
  "preactjs/preact": {
    ext: "js",
    groups: [
      {
        versions: ["4152"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="test/browser/components.test.js"',
        ],
      },
      {
        versions: ["4316"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="test/browser/events.test.js"',
        ],
      },
      {
        versions: ["4245"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="hooks/test/browser/useId.test.js"',
        ],
      },
      {
        versions: ["4182", "3689"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="hooks/test/browser/errorBoundary.test.js"',
        ],
      },
      {
        versions: ["4436"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="test/browser/refs.test.js"',
        ],
      },
      {
        versions: ["3763"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="test/browser/lifecycles/componentDidMount.test.js"',
        ],
      },
      {
        versions: ["3739"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="hooks/test/browser/useState.test.js"',
        ],
      },
      {
        versions: ["3567", "3345"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="hooks/test/browser/useEffect.test.js"',
        ],
      },
      {
        versions: ["3562"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="compat/test/browser/render.test.js"',
        ],
      },
      {
        versions: ["3454"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="test/browser/svg.test.js"',
        ],
      },
      {
        versions: ["3062", "3010", "2927", "2757"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="test/browser/render.test.js"',
        ],
      },
      {
        versions: ["2896"],
        testCmd: [
          'COVERAGE=false BABEL_NO_MODULES=true npx karma start karma.conf.js --single-run --grep="compat/test/browser/memo.test.js"',
        ],
      },
    ],
  },
  "axios/axios": {
    ext: "js",
    groups: [
      { versions: ["5892"], testCmd: ["npx mocha test/unit/adapters/http.js -R tap -g 'compression'"] },
      {
        versions: ["5316"],
        testCmd: ["npx mocha test/unit/adapters/http.js -R tap -g 'FormData'"],
        build: ["npm install"],
      },
      {
        versions: ["4738"],
        testCmd: ["timeout 10s npx mocha -R tap test/unit/adapters/http.js -g 'timeout'"],
      },
      { versions: ["4731"], testCmd: ["npx mocha -R tap test/unit/adapters/http.js -g 'body length'"] },
      { versions: ["6539"], testCmd: ["npx mocha -R tap test/unit/regression/SNYK-JS-AXIOS-7361793.js"] },
      { versions: ["5085"], testCmd: ["npx mocha -R tap test/unit/regression/bugs.js"] },
    ],
  },
  "phpoffice/phpspreadsheet": {
    ext: "php",
    groups: [
      {
        versions: ["4313"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Reader/Ods/FormulaTranslatorTest.php",
        ],
      },
      {
        versions: ["4214"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Calculation/Functions/MathTrig/RoundDownTest.php",
        ],
      },
      {
        versions: ["4186", "3463"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Writer/Xlsx/FunctionPrefixTest.php",
        ],
      },
      {
        versions: ["4114"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Worksheet/Issue4112Test.php",
        ],
      },
      {
        versions: ["3940"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Worksheet/WorksheetTest.php",
        ],
      },
      {
        versions: ["3903"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Shared/StringHelperTest.php",
        ],
      },
      {
        versions: ["3570"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Calculation/Functions/LookupRef/VLookupTest.php",
        ],
      },
      {
        versions: ["3469"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Style/StyleTest.php",
        ],
      },
      {
        versions: ["3659"],
        testCmd: [
          "./vendor/bin/phpunit --testdox --colors=never tests/PhpSpreadsheetTests/Worksheet/Table/Issue3635Test.php",
        ],
      },
    ],
  },
  "laravel/framework": {
    ext: "php",
    groups: [
      {
        versions: ["53914"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Integration/Database/DatabaseConnectionsTest.php",
        ],
      },
      {
        versions: ["53206"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Support/SupportJsTest.php"],
      },
      {
        versions: ["52866"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Container/ContextualAttributeBindingTest.php",
        ],
      },
      {
        versions: ["52684"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Support/SupportStrTest.php"],
      },
      {
        versions: ["52680"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Database/DatabaseEloquentInverseRelationTest.php",
        ],
      },
      {
        versions: ["52451"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Validation/ValidationValidatorTest.php --filter 'custom'",
        ],
      },
      {
        versions: ["53949"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Support/OnceTest.php"],
      },
      {
        versions: ["51890"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Validation/ValidationValidatorTest.php --filter 'attribute'",
        ],
      },
      {
        versions: ["51195"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/View/Blade/BladeVerbatimTest.php"],
      },
      {
        versions: ["48636"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Database/DatabaseEloquentModelTest.php"],
      },
      {
        versions: ["48573"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Cache/CacheArrayStoreTest.php"],
      },
      {
        versions: ["46234"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Routing/RoutingUrlGeneratorTest.php"],
      },
      {
        versions: ["53696"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Database/DatabaseSchemaBlueprintTest.php",
        ],
      },
    ],
  },
  "php-cs-fixer/php-cs-fixer": {
    ext: "php",
    groups: [
      {
        versions: ["8367", "7635"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Fixer/Import/FullyQualifiedStrictTypesFixerTest.php",
        ],
      },
      {
        versions: ["8331"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Fixer/LanguageConstruct/NullableTypeDeclarationFixerTest.php",
        ],
      },
      {
        versions: ["8075"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Fixer/PhpUnit/PhpUnitAttributesFixerTest.php",
        ],
      },
      {
        versions: ["8064"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Fixer/StringNotation/SimpleToComplexStringVariableFixerTest.php",
        ],
      },
      {
        versions: ["7998"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Fixer/Casing/ConstantCaseFixerTest.php"],
      },
      {
        versions: ["7875", "7663"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Fixer/Whitespace/StatementIndentationFixerTest.php",
        ],
      },
      {
        versions: ["7523"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Fixer/Operator/BinaryOperatorSpacesFixerTest.php",
        ],
      },
      {
        versions: ["8256"],
        testCmd: [
          "vendor/bin/phpunit --testdox --colors=never tests/Fixer/PhpTag/BlankLineAfterOpeningTagFixerTest.php",
        ],
      },
    ],
  },
  "briannesbitt/carbon": {
    ext: "php",
    groups: [
      {
        versions: ["3103"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/CarbonImmutable/SettersTest.php"],
      },
      {
        versions: ["3098", "3005"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/CarbonInterval/ConstructTest.php"],
      },
      {
        versions: ["3073", "2981"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/CarbonInterval/TotalTest.php"],
      },
      {
        versions: ["3041"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/CarbonPeriod/CreateTest.php"],
      },
      {
        versions: ["2813"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Factory/FactoryTest.php"],
        build: ["composer update", "composer install"],
      },
      {
        versions: ["2752"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/CarbonImmutable/IsTest.php"],
      },
      {
        versions: ["2665"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/Carbon/RoundTest.php"],
      },
      {
        versions: ["2762"],
        testCmd: ["vendor/bin/phpunit --testdox --colors=never tests/CarbonInterval/RoundingTest.php"],
      },
    ],
  },
  "astropy/astropy": {
    ext: "py",
    groups: [
      {
        versions: ["3.0", "3.1", "3.2", "4.1", "4.2", "4.3", "5.0", "5.1", "5.2", "v5.3"],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .[test] --verbose",
      },
      {
        versions: ["0.1", "0.2", "0.3", "0.4", "1.1", "1.2", "1.3"],
        testCmd: "pytest -rA -vv -o console_output_style=classic --tb=no",
        install: "python -m pip install -e .[test] --verbose",
      },
    ],
  },
  "dbt-labs/dbt-core": {
    ext: "py",
    groups: [
      {
        versions: [
          "0.13",
          "0.14",
          "0.15",
          "0.16",
          "0.17",
          "0.18",
          "0.19",
          "0.20",
          "0.21",
          "1.0",
          "1.1",
          "1.2",
          "1.3",
          "1.4",
          "1.5",
          "1.6",
          "1.7",
        ],
        install: "python -m pip install -e .",
      },
    ],
  },
  "django/django": {
    ext: "py",
    groups: [
      {
        versions: ["1.7", "1.8", "1.10", "1.11", "2.0", "2.1", "2.2"],
        testCmd: "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
        install: "python setup.py install",
        evalCommands: [
          "export LANG=en_US.UTF-8",
          "export LC_ALL=en_US.UTF-8",
          "export PYTHONIOENCODING=utf8",
          "export LANGUAGE=en_US:en",
        ],
      },
      {
        versions: ["1.9"],
        testCmd: "./tests/runtests.py --verbosity 2",
        install: "python setup.py install",
        evalCommands: [
          "export LANG=en_US.UTF-8",
          "export LC_ALL=en_US.UTF-8",
          "export PYTHONIOENCODING=utf8",
          "export LANGUAGE=en_US:en",
        ],
      },
      {
        versions: ["1.4", "1.5", "1.6"],
        testCmd: "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
        install: "python setup.py install",
      },
      {
        versions: ["3.0", "3.1", "3.2"],
        testCmd: "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
        install: "python -m pip install -e .",
        evalCommands: [
          "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
          "export LANG=en_US.UTF-8",
          "export LANGUAGE=en_US:en",
          "export LC_ALL=en_US.UTF-8",
        ],
      },
      {
        versions: ["4.0", "4.1", "4.2", "5.0", "5.1", "5.2"],
        testCmd: "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
        install: "python -m pip install -e .",
      },
    ],
  },
  "matplotlib/matplotlib": {
    ext: "py",
    groups: [
      {
        versions: ["3.5", "3.6", "3.7", "3.1", "3.2", "3.3", "3.4", "3.0"],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
      {
        versions: ["3.8", "3.9"],
        testCmd: "pytest -rA",
        install: 'python -m pip install --no-build-isolation -e ".[dev]"',
      },
      {
        versions: ["2.0", "2.1", "2.2", "1.0", "1.1", "1.2", "1.3", "1.4", "1.5"],
        testCmd: "pytest -rA",
        install: "python setup.py build; python setup.py install",
      },
    ],
  },
  "marshmallow-code/marshmallow": {
    ext: "py",
    groups: [
      {
        versions: [
          "2.18",
          "2.19",
          "2.20",
          "3.0",
          "3.1",
          "3.10",
          "3.11",
          "3.12",
          "3.13",
          "3.15",
          "3.16",
          "3.19",
          "3.2",
          "3.4",
          "3.8",
          "3.9",
        ],
        testCmd: "pytest -rA",
        install: "python -m pip install -e '.[dev]'",
      },
    ],
  },
  "mwaskom/seaborn": {
    ext: "py",
    groups: [
      { versions: ["0.11"], testCmd: "pytest --no-header -rA", install: "python -m pip install -e ." },
      {
        versions: ["0.12", "0.13", "0.14"],
        testCmd: "pytest --no-header -rA",
        install: "python -m pip install -e .[dev]",
      },
    ],
  },
  "pallets/flask": {
    ext: "py",
    groups: [
      {
        versions: ["2.0", "2.1", "2.2", "2.3", "3.0", "3.1"],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
    ],
  },
  "psf/requests": {
    ext: "py",
    groups: [
      {
        versions: [
          "0.7",
          "0.8",
          "0.9",
          "0.11",
          "0.13",
          "0.14",
          "1.1",
          "1.2",
          "2.0",
          "2.2",
          "2.3",
          "2.4",
          "2.5",
          "2.7",
          "2.8",
          "2.9",
          "2.10",
          "2.11",
          "2.12",
          "2.17",
          "2.18",
          "2.19",
          "2.22",
          "2.26",
          "2.25",
          "2.27",
          "2.31",
          "3.0",
        ],
        testCmd: "pytest -rA",
        install: "python -m pip install .",
      },
    ],
  },
  "pvlib/pvlib-python": {
    ext: "py",
    groups: [
      {
        versions: ["0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9"],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .[all]",
      },
    ],
  },
  "pydata/xarray": {
    ext: "py",
    groups: [
      {
        versions: ["0.12", "0.18", "0.19", "0.20", "2022.03", "2022.06", "2022.09", "2023.07", "2024.05"],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
    ],
  },
  "pydicom/pydicom": {
    ext: "py",
    groups: [
      {
        versions: ["1.0", "1.1", "1.2", "1.3", "1.4", "2.0", "2.1", "2.2", "2.3", "2.4", "3.0"],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
    ],
  },
  "pylint-dev/astroid": {
    ext: "py",
    groups: [
      {
        versions: ["2.10", "2.12", "2.13", "2.14", "2.15", "2.16", "2.5", "2.6", "2.7", "2.8", "2.9", "3.0"],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
    ],
  },
  "pylint-dev/pylint": {
    ext: "py",
    groups: [
      {
        versions: [
          "2.10",
          "2.11",
          "2.13",
          "2.14",
          "2.15",
          "2.16",
          "2.17",
          "2.8",
          "2.9",
          "3.0",
          "3.1",
          "3.2",
          "3.3",
          "4.0",
        ],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
    ],
  },
  "pytest-dev/pytest": {
    ext: "py",
    groups: [
      {
        versions: [
          "4.4",
          "4.5",
          "4.6",
          "5.0",
          "5.1",
          "5.2",
          "5.3",
          "5.4",
          "6.0",
          "6.2",
          "6.3",
          "7.0",
          "7.1",
          "7.2",
          "7.4",
          "8.0",
          "8.1",
          "8.2",
          "8.3",
          "8.4",
        ],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
    ],
  },
  "pyvista/pyvista": {
    ext: "py",
    groups: [
      {
        versions: [
          "0.20",
          "0.21",
          "0.22",
          "0.23",
          "0.24",
          "0.25",
          "0.26",
          "0.27",
          "0.28",
          "0.29",
          "0.30",
          "0.31",
          "0.32",
          "0.33",
          "0.34",
          "0.35",
          "0.36",
          "0.37",
          "0.38",
          "0.39",
          "0.40",
          "0.41",
          "0.42",
          "0.43",
        ],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
    ],
  },
  "scikit-learn/scikit-learn": {
    ext: "py",
    groups: [
      {
        versions: ["0.20", "0.21", "0.22", "1.3", "1.4", "1.5", "1.6"],
        testCmd: "pytest -rA",
        install: "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",
      },
    ],
  },
  "sphinx-doc/sphinx": {
    ext: "py",
    groups: [
      {
        versions: [
          "1.5",
          "1.6",
          "1.7",
          "1.8",
          "2.0",
          "2.1",
          "2.2",
          "2.3",
          "2.4",
          "3.0",
          "3.1",
          "3.2",
          "3.3",
          "3.4",
          "3.5",
          "4.0",
          "4.1",
          "4.2",
          "4.3",
          "4.4",
          "4.5",
          "5.0",
          "5.1",
          "5.2",
          "5.3",
          "6.0",
          "6.2",
          "7.0",
          "7.1",
          "7.2",
          "7.3",
          "7.4",
          "8.0",
          "8.1",
        ],
        testCmd: "tox --current-env -epy39 -v --",
        install: "python -m pip install -e .[test]",
      },
    ],
  },
  "sqlfluff/sqlfluff": {
    ext: "py",
    groups: [
      {
        versions: [
          "0.10",
          "0.11",
          "0.12",
          "0.13",
          "0.4",
          "0.5",
          "0.6",
          "0.8",
          "0.9",
          "1.0",
          "1.1",
          "1.2",
          "1.3",
          "1.4",
          "2.0",
          "2.1",
          "2.2",
        ],
        testCmd: "pytest -rA",
        install: "python -m pip install -e .",
      },
    ],
  },
  "swe-bench/humaneval": { ext: "py", groups: [{ versions: ["1.0"], testCmd: "python" }] },
  "sympy/sympy": {
    ext: "py",
    groups: [
      {
        versions: [
          "0.7",
          "1.0",
          "1.1",
          "1.10",
          "1.11",
          "1.12",
          "1.2",
          "1.4",
          "1.5",
          "1.6",
          "1.7",
          "1.8",
          "1.9",
          "1.13",
          "1.14",
        ],
        testCmd: "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
        install: "python -m pip install -e .",
      },
    ],
  },
  "jekyll/jekyll": {
    ext: "rb",
    groups: [
      { versions: ["9141"], testCmd: ['bundle exec ruby -I test test/test_site.rb -v -n "/static files/"'] },
      {
        versions: ["8761"],
        testCmd: [
          "bundle exec cucumber --publish-quiet --format progress --no-color features/post_data.feature:6 features/post_data.feature:30",
        ],
      },
      {
        versions: ["8047"],
        testCmd: ['bundle exec ruby -I test test/test_filters.rb -v -n "/where_exp filter/"'],
      },
      {
        versions: ["8167"],
        testCmd: ['bundle exec ruby -I test test/test_utils.rb -v -n "/Utils.slugify/"'],
      },
      {
        versions: ["8771"],
        testCmd: [
          "bundle exec cucumber --publish-quiet --format progress --no-color features/incremental_rebuild.feature:27 features/incremental_rebuild.feature:70",
        ],
      },
    ],
  },
  "fluent/fluentd": {
    ext: "rb",
    groups: [
      {
        versions: ["4598"],
        testCmd: ["bundle exec ruby test/plugin_helper/test_http_server_helper.rb -v -n '/mount/'"],
      },
      {
        versions: ["4311"],
        testCmd: ["bundle exec ruby test/config/test_system_config.rb -v -n '/rotate_age/'"],
      },
      { versions: ["4655"], testCmd: ["bundle exec ruby test/plugin/test_in_http.rb -v -n '/test_add/'"] },
      { versions: ["4030"], testCmd: ["bundle exec ruby test/plugin/out_forward/test_ack_handler.rb -v"] },
      { versions: ["3917"], testCmd: ["bundle exec ruby test/test_config.rb -v"] },
      {
        versions: ["3640"],
        testCmd: ["bundle exec ruby test/plugin_helper/test_retry_state.rb -v -n '/exponential backoff/'"],
      },
      { versions: ["3641"], testCmd: ["bundle exec ruby test/test_supervisor.rb -v"] },
      {
        versions: ["3616"],
        testCmd: ["bundle exec ruby test/plugin/test_in_http.rb -v -n '/test_application/'"],
      },
      {
        versions: ["3631"],
        testCmd: ["bundle exec ruby test/test_event_router.rb -v -n '/handle_emits_error/'"],
      },
      {
        versions: ["3466"],
        testCmd: ["bundle exec ruby test/plugin/test_in_tail.rb -v -n '/test_should_replace_target_info/'"],
      },
      {
        versions: ["3328"],
        testCmd: [
          "bundle exec ruby test/plugin/test_in_tail.rb -v -n '/test_ENOENT_error_after_setup_watcher/'",
        ],
      },
      {
        versions: ["3608"],
        testCmd: [
          "bundle exec ruby test/plugin/test_output_as_buffered_retries.rb -v -n '/retry_max_times/'",
        ],
      },
    ],
  },
  "fastlane/fastlane": {
    ext: "rb",
    groups: [
      {
        versions: ["21857"],
        testCmd: [
          "FASTLANE_SKIP_UPDATE_CHECK=1 bundle exec rspec ./fastlane/spec/lane_manager_base_spec.rb --no-color --format json | tail -n +2 | jq -r '.examples[] | \"\\(.description) - \\(.id) - \\(.status)\"'",
        ],
      },
      {
        versions: ["20958"],
        testCmd: [
          "FASTLANE_SKIP_UPDATE_CHECK=1 bundle exec rspec ./fastlane/spec/actions_specs/import_from_git_spec.rb --no-color --format json | tail -n +2 | jq -r '.examples[] | \"\\(.description) - \\(.id) - \\(.status)\"'",
        ],
      },
      {
        versions: ["20642"],
        testCmd: [
          "FASTLANE_SKIP_UPDATE_CHECK=1 bundle exec rspec ./frameit/spec/device_spec.rb --no-color --format json | tail -n +2 | jq -r '.examples[] | \"\\(.description) - \\(.id) - \\(.status)\"'",
        ],
      },
      {
        versions: ["19765"],
        testCmd: [
          "FASTLANE_SKIP_UPDATE_CHECK=1 bundle exec rspec ./fastlane/spec/actions_specs/download_dsyms_spec.rb --no-color --format json | tail -n +2 | jq -r '.examples[] | \"\\(.description) - \\(.id) - \\(.status)\"'",
        ],
      },
      {
        versions: ["20975"],
        testCmd: [
          "FASTLANE_SKIP_UPDATE_CHECK=1 bundle exec rspec ./match/spec/storage/s3_storage_spec.rb --no-color --format json | tail -n +2 | jq -r '.examples[] | \"\\(.description) - \\(.id) - \\(.status)\"'",
        ],
      },
      {
        versions: ["19304", "19207"],
        testCmd: [
          "FASTLANE_SKIP_UPDATE_CHECK=1 bundle exec rspec ./fastlane/spec/actions_specs/zip_spec.rb --no-color --format json | tail -n +2 | jq -r '.examples[] | \"\\(.description) - \\(.id) - \\(.status)\"'",
        ],
      },
    ],
  },
  "jordansissel/fpm": {
    ext: "rb",
    groups: [
      {
        versions: ["1850"],
        testCmd: [
          "bundle exec rspec spec/fpm/package/empty_spec.rb --no-color --format json | sed -n '/^{/,$p' | jq -r '.examples[] | \"\\(.description) - \\(.status)\"'",
        ],
      },
      {
        versions: ["1829"],
        testCmd: [
          "bundle exec rspec spec/fpm/package/deb_spec.rb --no-color --format json | sed -n '/^{/,$p' | jq -r '.examples[] | \"\\(.description) - \\(.status)\"'",
        ],
      },
    ],
  },
  "faker-ruby/faker": {
    ext: "rb",
    groups: [
      {
        versions: ["2970"],
        testCmd: ["bundle exec ruby test/faker/default/test_faker_internet.rb -v -n '/email/'"],
      },
      {
        versions: ["2705"],
        testCmd: ["bundle exec ruby test/faker/default/test_faker_internet.rb -v -n '/password/'"],
      },
    ],
  },
  "rubocop/rubocop": {
    ext: "rb",
    groups: [
      {
        versions: ["13705"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/lint/out_of_range_regexp_ref_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13687"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/lint/safe_navigation_chain_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13680"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/redundant_line_continuation_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13668"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/sole_nested_conditional_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13627"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/multiple_comparison_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13653"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/access_modifier_declarations_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13579"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/layout/line_continuation_spacing_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13560"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/file_null_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13503"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/dig_chain_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13479"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/layout/leading_comment_space_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13431"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/layout/empty_lines_around_method_body_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13424"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/safe_navigation_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13393"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/guard_clause_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13396"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/redundant_parentheses_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13375"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cli_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
      {
        versions: ["13362"],
        testCmd: [
          'bundle exec rspec spec/rubocop/cop/style/redundant_freeze_spec.rb --no-color --format json | sed -n \'/^{/,$p\' | \\\n  jq -r \'.examples | group_by(.description) | .[] |\n    if any(select(.status == "failed")) then\n      (.[0] | "\\(.description) - failed")\n    else\n      (.[0] | "\\(.description) - \\(.status)")\n    end\'',
        ],
      },
    ],
  },
  "burntsushi/ripgrep": {
    ext: "rs",
    groups: [
      {
        versions: ["2576"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package ripgrep --test integration -- regression"],
      },
      {
        versions: ["2209"],
        testCmd: [
          "RUSTFLAGS=-Awarnings cargo test --package ripgrep --test integration -- regression::r2208 --exact",
        ],
      },
    ],
  },
  "sharkdp/bat": {
    ext: "rs",
    groups: [
      {
        versions: ["3108", "2201"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package bat --test integration_tests pag"],
      },
      {
        versions: ["2835"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package bat --test integration_tests header"],
      },
      {
        versions: ["2650"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package bat --test integration_tests map_syntax"],
      },
      {
        versions: ["2393"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package bat --test integration_tests cache_"],
      },
      {
        versions: ["2260"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package bat --test integration_tests syntax"],
      },
      {
        versions: ["1892"],
        testCmd: [
          "RUSTFLAGS=-Awarnings cargo test --package bat --test integration_tests ignored_suffix_arg",
        ],
      },
      {
        versions: ["562"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package bat --test integration_tests cache"],
      },
    ],
  },
  "astral-sh/ruff": {
    ext: "rs",
    groups: [
      {
        versions: ["15626"],
        testCmd: ["cargo test --package ruff_linter --lib rules::flake8_simplify::tests"],
      },
      { versions: ["15543"], testCmd: ["cargo test --package ruff_linter --lib rules::pyupgrade"] },
      { versions: ["15443"], testCmd: ["cargo test --package ruff_linter --lib rules::flake8_bandit"] },
      { versions: ["15394"], testCmd: ["cargo test --package ruff_linter --lib rules::flake8_pie"] },
      { versions: ["15356"], testCmd: ["cargo test --package ruff_linter --lib rules::pycodestyle"] },
      { versions: ["15330"], testCmd: ["cargo test --package ruff_linter --lib rules::eradicate"] },
      { versions: ["15309"], testCmd: ["cargo test --package ruff_linter 'f52'"] },
    ],
  },
  "tokio-rs/tokio": {
    ext: "rs",
    groups: [
      { versions: ["6724"], testCmd: ["cargo test --test io_write_all_buf --no-fail-fast"] },
      { versions: ["6838"], testCmd: ["cargo test --test uds_stream --no-fail-fast"] },
      { versions: ["6752"], testCmd: ["cargo test --test time_delay_queue --no-fail-fast"] },
      { versions: ["4867"], testCmd: ["cargo test --test sync_broadcast --no-fail-fast"] },
      {
        versions: ["4898"],
        testCmd: ['RUSTFLAGS="--cfg tokio_unstable" cargo test --features full --test rt_metrics'],
      },
      { versions: ["6603"], testCmd: ["cargo test --test sync_mpsc --no-fail-fast"] },
      {
        versions: ["6551"],
        testCmd: [
          'RUSTFLAGS="--cfg tokio_unstable" cargo test --features full --test rt_metrics --no-fail-fast',
        ],
      },
      {
        versions: ["4384"],
        testCmd: [
          "RUSTFLAGS=-Awarnings cargo test --package tokio --test net_types_unwind --features full --no-fail-fast",
        ],
      },
      {
        versions: ["7139"],
        testCmd: ['RUSTFLAGS="--cfg tokio_unstable" cargo test --test fs_file --no-fail-fast'],
      },
    ],
  },
  "uutils/coreutils": {
    ext: "rs",
    groups: [
      {
        versions: ["6690"],
        testCmd: [
          "cargo test --no-fail-fast -- test_cp_cp test_cp_same_file test_cp_multiple_files test_cp_single_file test_cp_no_file",
        ],
      },
      { versions: ["6731"], testCmd: ["cargo test backslash --no-fail-fast"] },
      { versions: ["6575"], testCmd: ["cargo test cksum --no-fail-fast"] },
      { versions: ["6682"], testCmd: ["cargo test mkdir --no-fail-fast"] },
      { versions: ["6377"], testCmd: ["cargo test test_env --no-fail-fast"] },
    ],
  },
  "nushell/nushell": {
    ext: "rs",
    groups: [
      {
        versions: ["13246"],
        testCmd: ["cargo test -p nu-command --no-fail-fast --test main find::"],
        build: ["cargo build"],
      },
      { versions: ["12950"], testCmd: ["cargo test external_arguments --no-fail-fast"] },
      { versions: ["12901"], testCmd: ["cargo test --no-fail-fast shell::env"] },
      {
        versions: ["13831"],
        testCmd: ["cargo test -p nu-command --no-fail-fast split_column"],
        build: ["cargo build"],
      },
      {
        versions: ["13605"],
        testCmd: ["cargo test -p nu-command --no-fail-fast ls::"],
        build: ["cargo build"],
      },
    ],
  },
  "tokio-rs/axum": {
    ext: "rs",
    groups: [
      {
        versions: ["2096", "1934"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package axum --lib -- routing::tests::fallback"],
      },
      {
        versions: ["1730"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package axum --lib -- routing::tests::mod state"],
      },
      { versions: ["1119"], testCmd: ["RUSTFLAGS=-Awarnings cargo test --package axum --lib slash"] },
      {
        versions: ["734"],
        testCmd: ["RUSTFLAGS=-Awarnings cargo test --package axum --lib -- routing::tests::head"],
      },
      {
        versions: ["691"],
        testCmd: [
          "RUSTFLAGS=-Awarnings cargo test --package axum --lib -- routing::tests::nest::nesting_router_at_root --exact",
        ],
      },
      {
        versions: ["682"],
        testCmd: [
          "RUSTFLAGS=-Awarnings cargo test --package axum --lib trailing -- with_trailing_slash_post without_trailing_slash_post",
        ],
      },
    ],
  },
};
