# Sourced once by the mysql image's entrypoint, on an empty data volume (this folder is its
# /docker-entrypoint-initdb.d). Keep this file NOT executable: only a sourced script has the
# entrypoint's docker_process_sql (the mysql client, as root, on the initializing server).
# The server runs with the binary log as the worker needs it (docker-compose.yml's command).
# Sets up:
#   shop          the source: a demo schema captured by the worker of docker/config/shop_mysql.toml
#   dblog         the database of the worker's watermark table (the worker creates the table)
#   'dblog'@'%'   the worker's user, password $DBLOG_MYSQL_PASSWORD, with the grants of
#                 docs/mysql.md: REPLICATION SLAVE, REPLICATION CLIENT, SELECT on shop,
#                 SELECT, INSERT, UPDATE, CREATE on dblog

if ! declare -F docker_process_sql >/dev/null; then
  echo "10-dblog.sh: must be sourced by the mysql image's entrypoint (remove its x bit)" >&2
  exit 1
fi
: "${DBLOG_MYSQL_PASSWORD:?is not set: the password of the dblog user (see .env.example)}"

# A MySQL string literal: backslashes and quotes escaped.
dblog_sql_literal() {
  local text=${1//\\/\\\\}
  printf "'%s'" "${text//\'/\\\'}"
}

docker_process_sql <<EOSQL
CREATE DATABASE shop CHARACTER SET utf8mb4;
CREATE TABLE shop.customers (
    id         BIGINT NOT NULL PRIMARY KEY,
    name       VARCHAR(100) NOT NULL,
    email      VARCHAR(200) NOT NULL,
    country    CHAR(2) NOT NULL,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
CREATE TABLE shop.orders (
    id          BIGINT NOT NULL PRIMARY KEY,
    customer_id BIGINT NOT NULL,
    amount      DECIMAL(12, 2) NOT NULL,
    status      ENUM('new', 'paid', 'shipped') NOT NULL,
    created_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;

SET SESSION cte_max_recursion_depth = 10000;
INSERT INTO shop.customers (id, name, email, country)
WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
SELECT i, CONCAT('customer ', i), CONCAT('customer', i, '@example.com'),
       ELT(1 + i % 4, 'DE', 'FR', 'NL', 'US')
FROM n;
INSERT INTO shop.orders (id, customer_id, amount, status)
WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
SELECT i, 1 + i % 1000, ROUND((i % 997) * 1.37 + 5, 2), ELT(1 + i % 3, 'new', 'paid', 'shipped')
FROM n;

CREATE USER 'dblog'@'%' IDENTIFIED BY $(dblog_sql_literal "$DBLOG_MYSQL_PASSWORD");
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'dblog'@'%';
GRANT SELECT ON shop.* TO 'dblog'@'%';
CREATE DATABASE dblog CHARACTER SET utf8mb4;
GRANT SELECT, INSERT, UPDATE, CREATE ON dblog.* TO 'dblog'@'%';
EOSQL
