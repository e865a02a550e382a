"""Complete settings; local.py, test.py and production.py only toggle what differs."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from csp.constants import NONE, SELF

from kope_web.env import (
    env_bool,
    env_choices,
    env_database_url,
    env_float,
    env_int,
    env_list,
    env_log_level,
    env_redis_url,
    env_secret,
    env_str,
    folders_made,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
DATA_DIR = Path(env_str("KOPE_DATA_DIR") or BASE_DIR / "var").resolve()

SECRET_KEY = env_secret("DJANGO_SECRET_KEY", "insecure-local-only-key-set-DJANGO_SECRET_KEY")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "ninja",  # its Swagger UI from its static files, not a CDN (the CSP allows only this server)
    "channels",
    "channels_postgres",
    "django_htmx",
    "template_partials",
    "csp",
    "axes",
    "apps.core",
    "apps.accounts",
    "apps.operators",
    "apps.devices",
    "apps.memory",
    "apps.runs",
    "apps.benchmarks",
    "apps.workbench",
    "apps.reports",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "apps.core.middleware.NulRefusingMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "apps.core.middleware.DomainErrorMiddleware",
    "axes.middleware.AxesMiddleware",  # last: it turns a locked-out login into its answer
]

ROOT_URLCONF = "kope_web.urls"
ASGI_APPLICATION = "kope_web.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.accounts.context_processors.current_team",
            ],
        },
    },
]

# --- Database: embedded PostgreSQL + pgvector unless DATABASE_URL names a server -------------
EMBEDDED_DATABASE = env_database_url("DATABASE_URL") is None
DATABASES = {
    "default": env_database_url("DATABASE_URL")
    or {
        "ENGINE": "kope_web.db.embedded",
        "NAME": env_str("KOPE_DB_NAME", "kope"),
        "USER": "postgres",
        "DATA_DIR": str(DATA_DIR),
        "SERVER_DATABASE": env_str("KOPE_DB_NAME", "kope"),
    }
}
# 0: a connection per request. Under ASGI every thread Daphne runs database code in would keep
# its own persistent connection (each websocket has one): 50 watchers took 87 of the embedded
# server's 100 connections in the load test (`make load`), and pages answered 503.
DATABASES["default"]["CONN_MAX_AGE"] = env_int("KOPE_DB_CONN_MAX_AGE", 0, maximum=3600)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# A server that takes the connection and never answers would otherwise hold each request and
# task for as long as TCP keeps the connection (minutes); a URL's own connect_timeout wins.
_url_options = DATABASES["default"].get("OPTIONS")
DATABASES["default"]["OPTIONS"] = {
    "connect_timeout": env_int("KOPE_DB_CONNECT_TIMEOUT", 10, minimum=1, maximum=600),
    **(_url_options if isinstance(_url_options, dict) else {}),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Broker and channel layer: Redis when REDIS_URL is set, else no server at all ----------
REDIS_URL = env_redis_url("REDIS_URL")
BROKER_DIR = DATA_DIR / "broker"

# kombu's Redis transport, with a channel that survives Redis going under an unacked message
# (see kope_web/broker.py).
REDIS_TRANSPORT = "kope_web.broker:RedisTransport"

# A Redis that takes the connection and never answers would hold a publish (a launch's
# request, a worker's live event) for minutes; past this it fails as Redis down does. Read
# without Redis too, so a bad value is reported before the day REDIS_URL is set.
REDIS_TIMEOUT = env_int("KOPE_REDIS_TIMEOUT", 10, minimum=1, maximum=600)

if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT = REDIS_TRANSPORT
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        "visibility_timeout": 3600,
        "socket_connect_timeout": REDIS_TIMEOUT,
        "socket_timeout": REDIS_TIMEOUT,
    }
    # The layer's reads wait on Redis by design (a blocking pop), so only its connects are
    # bounded.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_connect_timeout": REDIS_TIMEOUT}],
                "prefix": "kope",
            },
        }
    }
else:
    # Celery's filesystem transport keeps queues as files under var/broker, so the web server
    # and separate worker processes share them without a server; channels_postgres relays
    # websocket events through LISTEN/NOTIFY on the database we already have.
    CELERY_BROKER_URL = "filesystem://localhost//"
    # kombu's transport, with whole-file writes and claims (see kope_web/broker.py).
    CELERY_BROKER_TRANSPORT = "kope_web.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "rejected_folder": str(BROKER_DIR / "rejected"),
        "store_processed": False,
        "polling_interval": 0.2,
    }
    # kombu expects the folders to exist; every process that sends or consumes loads settings.
    BROKER_FOLDERS = ("broker/queue", "broker/control", "broker/processed", "broker/rejected")
    folders_made("KOPE_DATA_DIR", DATA_DIR, BROKER_FOLDERS)
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "kope_web.channel_layers.DatabaseChannelLayer",
            "CONFIG": {"prefix": "kope"},
        }
    }

CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "agent"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_TIME_LIMIT = env_int("KOPE_TASK_TIME_LIMIT", 3600, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
# Device work is routed by target: a host with a device runs a worker on device.<target>.
# A name here is a queue's (device.cuda serves the triton and cuda targets), not a target's:
# a worker on a queue no target is sent to would leave every evaluation waiting.
DEVICE_QUEUE_NAMES = ("cpu", "cuda")
DEVICE_TARGETS = env_choices("KOPE_DEVICE_TARGETS", ["cpu"], DEVICE_QUEUE_NAMES)
AGENT_QUEUE = "agent"
# How long the Workers page waits for workers to answer a broadcast ping.
WORKER_PING_TIMEOUT_S = env_int("KOPE_WORKER_PING_TIMEOUT_MS", 1000, minimum=50) / 1000
# The commit a session records where the code is no git checkout (a Docker image: its build
# arg). Blank: asked of git.
CODE_VERSION = env_str("KOPE_CODE_VERSION")

# --- Auth ---------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# axes first: it refuses a locked-out login before the password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Login lockout (apps/accounts/lockout.py): failed logins as one account from one address, and
# from one address as any account, each with its limit; locked until the cool-off has passed
# since the last failure.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_FAILURE_LIMIT = env_int("KOPE_LOGIN_FAILURE_LIMIT", 5, minimum=1, maximum=1000)
LOGIN_ADDRESS_FAILURE_LIMIT = env_int(
    "KOPE_LOGIN_ADDRESS_FAILURE_LIMIT", 20, minimum=1, maximum=100_000
)
AXES_COOLOFF_TIME = timedelta(
    minutes=env_int("KOPE_LOGIN_COOLOFF_MINUTES", 15, minimum=1, maximum=24 * 60)
)
AXES_HANDLER = "apps.accounts.lockout.LockoutHandler"
AXES_LOCKOUT_CALLABLE = "apps.accounts.lockout.lockout_response"
AXES_RESET_ON_SUCCESS = True
# axes would also keep a row for every successful login, for ever; nothing reads them.
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False  # its start-up banner on every command; lockouts are still logged
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"

# --- Content security policy: no inline scripts, nothing from outside the server ---------
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "font-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# --- Static files ---------------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT: Path | None = DATA_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- The first admin, created by `manage.py bootstrap` ------------------------------------
KOPE_ADMIN_USERNAME = env_str("KOPE_ADMIN_USERNAME", "admin")
KOPE_ADMIN_PASSWORD = env_secret("KOPE_ADMIN_PASSWORD")
KOPE_HOST = env_str("KOPE_HOST", "127.0.0.1")
KOPE_PORT = env_int("KOPE_PORT", 8000, minimum=1, maximum=65535)
API_MAX_PAGE_SIZE = 200

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_log_level("KOPE_LOG_LEVEL", "INFO")},
    "loggers": {
        "pgserver": {"level": "WARNING"},
        # It warns on every event sent to a session nobody is watching, which is the usual case.
        "channels_postgres.database": {"level": "ERROR"},
    },
}

# --- Operators: limits for running reference code (always in a child process) -------------
KOPE_REFERENCE_TIMEOUT_S = env_int("KOPE_REFERENCE_TIMEOUT_S", 120, minimum=1)
KOPE_REFERENCE_MEMORY_MB = env_int("KOPE_REFERENCE_MEMORY_MB", 8192, minimum=512)
KOPE_REFERENCE_WARM = env_bool("KOPE_REFERENCE_WARM", True)
KOPE_BUILD_CACHE_DIR = DATA_DIR / "build-cache"
# Imports started from the browser or the API may only read folders under these roots.
KOPE_IMPORT_ROOTS = [
    Path(p).resolve() for p in env_list("KOPE_IMPORT_ROOTS", [str(DATA_DIR / "imports")])
]
# The most items one API page holds (`limit` above it is lowered to it).
NINJA_PAGINATION_MAX_LIMIT = 1000
# A request body (form or JSON) larger than this is refused: 413 from the API.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("KOPE_MAX_REQUEST_BYTES", 2_000_000, minimum=10_000)
KOPE_IMPORT_MAX_FILE_BYTES = env_int("KOPE_IMPORT_MAX_FILE_BYTES", 1_000_000, minimum=1024)
KOPE_IMPORT_MAX_CASES = env_int("KOPE_IMPORT_MAX_CASES", 200, minimum=1)
# An archive uploaded to the Imports page: its size, and what it may unpack to (bytes, files).
KOPE_IMPORT_MAX_ARCHIVE_BYTES = env_int("KOPE_IMPORT_MAX_ARCHIVE_BYTES", 20_000_000, minimum=1024)
KOPE_IMPORT_MAX_UNPACKED_BYTES = env_int("KOPE_IMPORT_MAX_UNPACKED_BYTES", 100_000_000,
                                         minimum=1024)  # fmt: skip
KOPE_IMPORT_MAX_ARCHIVE_FILES = env_int("KOPE_IMPORT_MAX_ARCHIVE_FILES", 5000, minimum=1)
# Where uploaded archives are unpacked, each into a fresh folder, removed when its import ends.
KOPE_IMPORT_UPLOAD_DIR = DATA_DIR / "uploads" / "imports"
# Workers that may die importing one problem before it is left out and the import goes on.
KOPE_IMPORT_MAX_ATTEMPTS = env_int("KOPE_IMPORT_MAX_ATTEMPTS", 2, minimum=1, maximum=10)

# --- Device execution: evaluating candidate kernels (apps/devices/evaluator/) ---------------
# The first four have the bounds of evaluator.EVAL_BOUNDS.
KOPE_EVAL_THREADS = env_int("KOPE_EVAL_THREADS", 1, minimum=1, maximum=1024)
KOPE_EVAL_SEEDS = env_int("KOPE_EVAL_SEEDS", 3, minimum=1, maximum=20)
KOPE_EVAL_WARMUP = env_int("KOPE_EVAL_WARMUP", 5, minimum=0, maximum=1000)
KOPE_EVAL_REPEATS = env_int("KOPE_EVAL_REPEATS", 100, minimum=1, maximum=100_000)
KOPE_EVAL_TIMEOUT_S = env_int("KOPE_EVAL_TIMEOUT_S", 120, minimum=1)
KOPE_EVAL_MEMORY_MB = env_int("KOPE_EVAL_MEMORY_MB", 8192, minimum=512)
KOPE_EVAL_MAX_ATTEMPTS = env_int("KOPE_EVAL_MAX_ATTEMPTS", 2, minimum=1, maximum=10)
KOPE_EVAL_WORK_DIR = env_str("KOPE_EVAL_WORK_DIR", "")

# --- Learning from use (SAGE): ATU value scores and UGC consolidation -----------------------
KOPE_ATU_MIN_RATE = env_float("KOPE_ATU_MIN_RATE", 0.05, minimum=0.0, maximum=1.0)
KOPE_UGC_MIN_ADOPTIONS = env_int("KOPE_UGC_MIN_ADOPTIONS", 3, minimum=1)
KOPE_UGC_MIN_OPERATORS = env_int("KOPE_UGC_MIN_OPERATORS", 3, minimum=1)
KOPE_HOT_MEMORY_TOKENS = env_int("KOPE_HOT_MEMORY_TOKENS", 10_000, minimum=100)
KOPE_HOT_FREQUENCY_BETA = env_float("KOPE_HOT_FREQUENCY_BETA", 0.1, minimum=0.0, maximum=1.0)

# --- Optimization sessions (apps/runs) and the Claude policy (apps/agents/claude) ------------
# Defaults for new sessions; each session records the values it ran with.
KOPE_SESSION_ROUNDS = env_int("KOPE_SESSION_ROUNDS", 30, minimum=1, maximum=1000)
KOPE_SESSION_TOKENS = env_int("KOPE_SESSION_TOKENS", 1_000_000, minimum=1)
KOPE_SESSION_PLATEAU = env_int("KOPE_SESSION_PLATEAU", 10, minimum=1)
KOPE_CONTEXT_TOKENS = env_int("KOPE_CONTEXT_TOKENS", 12_000, minimum=500)
# Never logged, never shown, never put into a prompt or a report.
ANTHROPIC_API_KEY = env_secret("ANTHROPIC_API_KEY")
KOPE_CLAUDE_MODEL = env_str("KOPE_CLAUDE_MODEL", "claude-sonnet-4-5")
KOPE_CLAUDE_BASE_URL = env_str("KOPE_CLAUDE_BASE_URL", "")  # empty: Anthropic's API
KOPE_CLAUDE_MAX_RETRIES = env_int("KOPE_CLAUDE_MAX_RETRIES", 4, minimum=0, maximum=20)
