package io.floe.conformance;

import java.io.Closeable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.rest.RESTCatalog;

/**
 * Builds {@link RESTCatalog} clients pointed at a live Floe server and wipes the catalog between
 * tests.
 *
 * <p>Configuration comes from the environment (all optional):
 *
 * <ul>
 *   <li>{@code FLOE_CATALOG_URI} - REST base URI, default {@value #DEFAULT_URI}
 *   <li>{@code FLOE_WAREHOUSE} - {@code warehouse} sent to {@code GET /v1/config}, default
 *       {@value #DEFAULT_WAREHOUSE}
 *   <li>{@code FLOE_CLIENT_ID} + {@code FLOE_CLIENT_SECRET} - OAuth2 client credentials; the token
 *       endpoint is {@code <uri>/v1/oauth/tokens} unless {@code FLOE_OAUTH2_SERVER_URI} is set;
 *       {@code FLOE_OAUTH2_SCOPE} overrides the scope (client default: {@code catalog})
 *   <li>{@code FLOE_LOCATION_BASE} - a location inside Floe's warehouse (e.g. {@code
 *       file:///srv/floe/warehouse/conformance}) used for the tests that request an explicit
 *       table/view location. Unset: Iceberg's defaults ({@code file:/tmp/...} and a JUnit temp dir),
 *       which a server that only accepts in-warehouse locations rejects.
 *   <li>{@code FLOE_CLEANUP} - {@code false} disables the drop-everything step around each test
 *   <li>{@code CATALOG_*} - raw catalog properties, same convention as Iceberg's REST
 *       Compatibility Kit: strip the prefix, {@code __} becomes {@code -}, {@code _} becomes
 *       {@code .}, lower-cased. E.g. {@code CATALOG_IO__IMPL=...} sets {@code io-impl}. These win
 *       over everything above.
 * </ul>
 */
final class FloeCatalogs {
  static final String DEFAULT_URI = "http://127.0.0.1:8181/catalog";
  static final String DEFAULT_WAREHOUSE = "default";
  static final String MAIN_CATALOG_NAME = "floe";

  private static final String CATALOG_ENV_PREFIX = "CATALOG_";
  private static final int MAX_NAMESPACE_DEPTH = 32;

  /** Set when the "reference" Maven profile runs the suites against Iceberg's own server. */
  private static volatile String referenceServerUri;

  private FloeCatalogs() {}

  static String env(String name, String defaultValue) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? defaultValue : value;
  }

  static String uri() {
    String uri = referenceServerUri != null ? referenceServerUri : env("FLOE_CATALOG_URI", DEFAULT_URI);
    while (uri.endsWith("/")) {
      uri = uri.substring(0, uri.length() - 1);
    }
    return uri;
  }

  static boolean cleanupEnabled() {
    return !"false".equalsIgnoreCase(env("FLOE_CLEANUP", "true"));
  }

  /** Base location for explicitly requested table/view locations, or null to use Iceberg's. */
  static String locationBase() {
    String base = env("FLOE_LOCATION_BASE", null);
    if (base == null) {
      return null;
    }
    while (base.endsWith("/")) {
      base = base.substring(0, base.length() - 1);
    }
    return base;
  }

  /** A short id to keep explicitly requested locations of different tests apart. */
  static String newTestId() {
    return UUID.randomUUID().toString().substring(0, 8);
  }

  /** Catalog properties shared by every client the harness creates. */
  static Map<String, String> baseProperties() {
    Map<String, String> props = new HashMap<>();

    // Fixture contract of CatalogTests / ViewCatalogTests: the main catalog must carry these
    // client-side table/view defaults and overrides (testDefaultTableProperties,
    // testOverrideTableProperties*, defaultViewProperties, overrideViewProperties, ...).
    props.put(CatalogProperties.TABLE_DEFAULT_PREFIX + "default-key1", "catalog-default-key1");
    props.put(CatalogProperties.TABLE_DEFAULT_PREFIX + "default-key2", "catalog-default-key2");
    props.put(CatalogProperties.TABLE_DEFAULT_PREFIX + "override-key3", "catalog-default-key3");
    props.put(CatalogProperties.TABLE_OVERRIDE_PREFIX + "override-key3", "catalog-override-key3");
    props.put(CatalogProperties.TABLE_OVERRIDE_PREFIX + "override-key4", "catalog-override-key4");
    props.put(CatalogProperties.VIEW_DEFAULT_PREFIX + "key1", "catalog-default-key1");
    props.put(CatalogProperties.VIEW_DEFAULT_PREFIX + "key2", "catalog-default-key2");
    props.put(CatalogProperties.VIEW_DEFAULT_PREFIX + "key3", "catalog-default-key3");
    props.put(CatalogProperties.VIEW_OVERRIDE_PREFIX + "key3", "catalog-override-key3");
    props.put(CatalogProperties.VIEW_OVERRIDE_PREFIX + "key4", "catalog-override-key4");

    String uri = uri();
    props.put(CatalogProperties.URI, uri);
    props.put(CatalogProperties.WAREHOUSE_LOCATION, env("FLOE_WAREHOUSE", DEFAULT_WAREHOUSE));

    String clientId = env("FLOE_CLIENT_ID", null);
    String clientSecret = env("FLOE_CLIENT_SECRET", null);
    if (clientId != null || clientSecret != null) {
      if (clientId == null || clientSecret == null) {
        throw new IllegalStateException("Set both FLOE_CLIENT_ID and FLOE_CLIENT_SECRET, or neither");
      }
      props.put("rest.auth.type", "oauth2");
      props.put("credential", clientId + ":" + clientSecret);
      props.put("oauth2-server-uri", env("FLOE_OAUTH2_SERVER_URI", uri + "/v1/oauth/tokens"));
      String scope = env("FLOE_OAUTH2_SCOPE", null);
      if (scope != null) {
        props.put("scope", scope);
      }
    }

    props.putAll(environmentCatalogProperties());
    return props;
  }

  /** {@code CATALOG_FOO__BAR_BAZ=v} becomes {@code foo-bar.baz=v}. */
  static Map<String, String> environmentCatalogProperties() {
    Map<String, String> props = new HashMap<>();
    System.getenv()
        .forEach(
            (key, value) -> {
              if (key.startsWith(CATALOG_ENV_PREFIX) && key.length() > CATALOG_ENV_PREFIX.length()) {
                String prop =
                    key.substring(CATALOG_ENV_PREFIX.length())
                        .replace("__", "-")
                        .replace('_', '.')
                        .toLowerCase(Locale.ROOT);
                props.put(prop, value);
              }
            });
    return props;
  }

  /** Creates and initializes a client; {@code additional} wins over the shared properties. */
  static RESTCatalog newCatalog(String name, Map<String, String> additional) {
    Map<String, String> props = baseProperties();
    props.putAll(additional);
    RESTCatalog catalog = new RESTCatalog();
    // HadoopFileIO (picked by ResolvingFileIO for file:/ locations) needs a Configuration.
    catalog.setConf(new Configuration());
    catalog.initialize(name, props);
    return catalog;
  }

  /** Human-readable effective configuration, secrets masked. */
  static String describe() {
    Map<String, String> shown = new TreeMap<>(baseProperties());
    shown.replaceAll(
        (k, v) -> k.equals("credential") || k.equals("token") || k.contains("secret") ? "****" : v);
    return shown.toString();
  }

  /**
   * Fails fast, with the cause attached, when the server cannot be reached (or rejects the
   * config/auth handshake), instead of letting every test time out on its own.
   */
  static void preflight() {
    if (Boolean.getBoolean("floe.reference-server")) {
      startReferenceServer();
    }
    try (RESTCatalog probe = newCatalog(MAIN_CATALOG_NAME, Map.of())) {
      System.err.printf(
          "[floe-conformance] connected to %s (config: %s)%n", uri(), describe());
    } catch (Exception e) {
      throw new IllegalStateException(
          "Cannot initialize Iceberg RESTCatalog against Floe at "
              + uri()
              + " (is the server running? set FLOE_CATALOG_URI / FLOE_WAREHOUSE / FLOE_CLIENT_ID / "
              + "FLOE_CLIENT_SECRET): "
              + e,
          e);
    }
  }

  /**
   * Starts Iceberg's reference REST server (org.apache.iceberg.rest.RESTCatalogServer from the
   * iceberg-open-api test fixtures; SQLite in-memory JdbcCatalog, temp-dir warehouse) once per JVM
   * on a free loopback port. Reflection keeps the default build free of its dependencies.
   */
  private static synchronized void startReferenceServer() {
    if (referenceServerUri != null) {
      return;
    }
    try {
      int port;
      try (java.net.ServerSocket socket = new java.net.ServerSocket(0)) {
        port = socket.getLocalPort();
      }
      Class<?> serverClass = Class.forName("org.apache.iceberg.rest.RESTCatalogServer");
      java.lang.reflect.Constructor<?> ctor = serverClass.getDeclaredConstructor(Map.class);
      ctor.setAccessible(true);
      Map<String, String> config = new HashMap<>();
      config.put("rest.port", String.valueOf(port));
      Object server = ctor.newInstance(config);
      serverClass.getMethod("start", boolean.class).invoke(server, false);
      Runtime.getRuntime()
          .addShutdownHook(
              new Thread(
                  () -> {
                    try {
                      serverClass.getMethod("stop").invoke(server);
                    } catch (Exception e) {
                      // JVM is exiting anyway
                    }
                  }));
      referenceServerUri = "http://127.0.0.1:" + port;
      System.err.printf("[floe-conformance] started Iceberg reference server at %s%n", referenceServerUri);
    } catch (Exception e) {
      throw new IllegalStateException("Cannot start Iceberg reference REST server: " + e, e);
    }
  }

  static void closeQuietly(Closeable closeable) {
    if (closeable == null) {
      return;
    }
    try {
      closeable.close();
    } catch (Exception e) {
      warn("closing catalog", e);
    }
  }

  /**
   * Drops every view, table (with purge) and namespace reachable from the root, deepest namespace
   * first. Best effort: failures are logged and the walk continues, so one broken endpoint does
   * not hide the results of the test that follows.
   */
  static void purgeAll(RESTCatalog catalog) {
    List<Namespace> roots;
    try {
      roots = catalog.listNamespaces();
    } catch (Exception e) {
      warn("listing top-level namespaces", e);
      return;
    }
    for (Namespace ns : roots) {
      purgeNamespace(catalog, ns, 0);
    }
  }

  private static void purgeNamespace(RESTCatalog catalog, Namespace ns, int depth) {
    if (depth > MAX_NAMESPACE_DEPTH) {
      warn("namespace tree deeper than " + MAX_NAMESPACE_DEPTH + " at " + ns, null);
      return;
    }

    // children first (nested namespaces)
    List<Namespace> children = new ArrayList<>();
    try {
      for (Namespace child : catalog.listNamespaces(ns)) {
        // guard against a server echoing the parent (or unrelated namespaces) back
        if (isStrictChild(ns, child)) {
          children.add(child);
        } else {
          warn("listNamespaces(" + ns + ") returned non-child " + child, null);
        }
      }
    } catch (Exception e) {
      warn("listing child namespaces of " + ns, e);
    }
    for (Namespace child : children) {
      purgeNamespace(catalog, child, depth + 1);
    }

    try {
      for (TableIdentifier view : catalog.listViews(ns)) {
        try {
          catalog.dropView(view);
        } catch (Exception e) {
          warn("dropping view " + view, e);
        }
      }
    } catch (Exception e) {
      warn("listing views of " + ns, e);
    }

    try {
      for (TableIdentifier table : catalog.listTables(ns)) {
        try {
          catalog.dropTable(table, true /* purge */);
        } catch (Exception e) {
          warn("dropping table " + table, e);
        }
      }
    } catch (Exception e) {
      warn("listing tables of " + ns, e);
    }

    try {
      catalog.dropNamespace(ns);
    } catch (Exception e) {
      warn("dropping namespace " + ns, e);
    }
  }

  private static boolean isStrictChild(Namespace parent, Namespace child) {
    String[] p = parent.levels();
    String[] c = child.levels();
    if (c.length <= p.length) {
      return false;
    }
    for (int i = 0; i < p.length; i++) {
      if (!p[i].equals(c[i])) {
        return false;
      }
    }
    return true;
  }

  private static void warn(String what, Exception e) {
    System.err.printf(
        "[floe-conformance] cleanup: %s%s%n", what, e == null ? "" : " failed: " + e);
  }
}
